"""Durations as people read them, for error messages and tables."""

from datetime import timedelta

_UNITS = (("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1))


def format_duration(value: timedelta) -> str:
    """The largest unit that divides the duration exactly: 300s -> '5m', 90s -> '90s'."""
    seconds = int(value.total_seconds())
    for suffix, size in _UNITS:
        if seconds and seconds % size == 0:
            return f"{seconds // size}{suffix}"
    return "0s"
