"""Durations as people read them, for error messages and tables."""

from datetime import timedelta

_UNITS = (("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1))


def parse_duration(text: str) -> timedelta:
    """``"90s"``, ``"15m"``, ``"1h"``, ``"2d"`` -> timedelta; ValueError names what it expected."""
    units = dict(_UNITS)
    number, unit = text[:-1], text[-1:]
    if unit not in units or not number.isdigit() or int(number) == 0:
        raise ValueError(f"{text!r} is not a duration like 90s, 15m, 1h or 2d")
    return timedelta(seconds=int(number) * units[unit])


def format_duration(value: timedelta) -> str:
    """The largest unit that divides the duration exactly: 300s -> '5m', 90s -> '90s'."""
    seconds = int(value.total_seconds())
    for suffix, size in _UNITS:
        if seconds and seconds % size == 0:
            return f"{seconds // size}{suffix}"
    return "0s"
