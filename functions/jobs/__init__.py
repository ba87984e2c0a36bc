"""Example jobs, one module each, for a user to copy."""
