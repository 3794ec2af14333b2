"""evaluation layer."""
