"""A benchmark row that cannot run on this machine: the table shows the reason instead of a figure."""


class CannotRunError(Exception):
    """A measurement cannot run here (an extra not installed, a port in use); the message is the reason."""
