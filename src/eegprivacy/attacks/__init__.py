"""attacks layer."""
