"""What the workers' output is written to: a text stream (sys.stdout), or a stage in front of one.

The local runtime's output passes through stages (conveyor.local.emf, .log_shipper, .console),
each writing whole lines on to the next; this is the little of a text stream each one needs.
"""

from typing import Protocol


class TextSink(Protocol):
    def write(self, text: str, /) -> int: ...

    def flush(self) -> None: ...

    def isatty(self) -> bool: ...
