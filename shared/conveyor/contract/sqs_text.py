"""What SQS carries in a message body or a string attribute: one pattern, compiled on first use.

The allowed characters span the whole of Unicode (limits.SQS_BODY_CHARACTERS); compiling their
class takes milliseconds, so the envelope, the dead-letter writer and strict mode share one
compiled pattern and no import pays for it.
"""

import re
from functools import cache

from conveyor.contract import limits


@cache
def _uncarried() -> re.Pattern[str]:
    return re.compile(f"[^{limits.SQS_BODY_CHARACTERS}]")


def first_uncarried(text: str) -> re.Match[str] | None:
    """The first character of ``text`` that SQS refuses, if any."""
    return _uncarried().search(text)


def replace_uncarried(text: str, replacement: str) -> str:
    """``text`` with every character SQS refuses replaced."""
    return _uncarried().sub(replacement, text)
