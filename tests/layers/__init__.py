"""What tests/test_layers.py reads besides imports: the edges written as strings."""
