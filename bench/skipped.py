"""A benchmark row that cannot run on this machine: the table shows the reason instead of a figure."""


class Skipped(Exception):
    """Raised by a measurement that cannot run here (an extra not installed, a port in use); the message is the reason."""
