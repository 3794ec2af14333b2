"""privacy layer."""
