"""Settings: `base` (read from the environment; what runs everywhere) and `test`."""
