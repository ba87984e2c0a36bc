"""Developer scripts run by Makefile targets; not part of the shipped library."""
