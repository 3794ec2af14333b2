"""federated layer."""
