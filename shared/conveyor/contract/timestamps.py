"""Time stamps as text: ISO 8601 in UTC ending in ``Z``, the one form Conveyor writes.

Message attributes, table items, job ids of scheduled runs and reports all use it, so a time
written by one part is read by any other, and text order is time order.
"""

from datetime import UTC, datetime


def utc_text(value: datetime, *, timespec: str = "auto") -> str:
    """``2026-11-29T16:00:00.123Z``; ``timespec`` as for ``datetime.isoformat`` ("seconds" for ids)."""
    return value.astimezone(UTC).isoformat(timespec=timespec).replace("+00:00", "Z")


def parse_utc(text: str) -> datetime:
    """An ISO 8601 time stamp as an aware UTC datetime; a naive one is taken as UTC.

    Raises ValueError if ``text`` is not a time stamp.
    """
    value = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    return value.astimezone(UTC) if value.tzinfo else value.replace(tzinfo=UTC)
