"""The operator side: what `conveyor` commands do against AWS (or the local runtime).

Status, DLQ inspection, redrive with a canary, discard, pause and resume, concurrency, drain,
backfill, audit and stats, and the destinations' shared limits. The CLI (conveyor.cli) only parses arguments and prints.
"""

from conveyor.ops.backfill import BackfillError, BackfillIncompleteError, InvalidBackfillError
from conveyor.ops.target import Target, TargetNotFoundError, find_target

__all__ = [
    "BackfillError",
    "BackfillIncompleteError",
    "InvalidBackfillError",
    "Target",
    "TargetNotFoundError",
    "find_target",
]
