"""Physical resource names, shared by the stack, the local runtime and the producer SDK.

Queues have fixed names, ``<prefix>-<queue>`` and ``<prefix>-<queue>-dlq``, so a producer
finds a queue with one GetQueueUrl call, against AWS or a local endpoint alike. The prefix
(``$CONVEYOR_PREFIX``, default ``conveyor``) keeps two deployments in one account apart.
"""

import os

from conveyor.contract import limits

PREFIX_ENV = "CONVEYOR_PREFIX"
DEFAULT_PREFIX = "conveyor"


def current_prefix() -> str:
    return os.environ.get(PREFIX_ENV) or DEFAULT_PREFIX


def queue_name(queue: str, *, fifo: bool = False, prefix: str | None = None) -> str:
    name = f"{prefix or current_prefix()}-{queue}"
    return name + limits.SQS_FIFO_SUFFIX if fifo else name


def dlq_name(queue: str, *, fifo: bool = False, prefix: str | None = None) -> str:
    return queue_name(f"{queue}-dlq", fifo=fifo, prefix=prefix)


def worker_function_name(queue: str, *, prefix: str | None = None) -> str:
    """A queue's worker function as the local runtime names it (in AWS the stack names it)."""
    return f"{queue_name(queue, prefix=prefix)}-worker"


def local_worker_log_group(queue: str) -> str:
    """Where the local runtime ships a queue's worker logs: Lambda's default group for that function name."""
    return f"/aws/lambda/{worker_function_name(queue)}"


def table_name(table: str, *, prefix: str | None = None) -> str:
    """A table's local physical name; in AWS the stack names tables and passes the names on."""
    return f"{prefix or current_prefix()}-{table}"


# Conveyor's own tables and queues, beside the declared ones: a declaration may not take these names.
IDEMPOTENCY_TABLE = "idempotency"
OUTBOX_TABLE = "outbox"
AUDIT_TABLE = "ops-audit"
LOCAL_EVENT_SOURCES_TABLE = "local-event-sources"
LEASES_TABLE = "leases"
CHECKPOINTS_TABLE = "checkpoints"
SCHEDULE_RUNS_TABLE = "schedule-runs"
# The destinations' shared state: rate buckets, concurrency slots, breakers, retry budgets.
LIMITS_TABLE = "limits"
# The effect ledger (conveyor.worker.effects): what jobs did at their destinations. Not "effects", which
# the example app's fake providers declare for their own side of the story.
EFFECTS_LEDGER_TABLE = "ledger"
# Which job each dedupe key given at enqueue made (conveyor.sdk.dedupe).
DEDUPE_TABLE = "dedupe"
OWN_TABLES = frozenset(
    {
        IDEMPOTENCY_TABLE,
        OUTBOX_TABLE,
        AUDIT_TABLE,
        LOCAL_EVENT_SOURCES_TABLE,
        LEASES_TABLE,
        CHECKPOINTS_TABLE,
        SCHEDULE_RUNS_TABLE,
        LIMITS_TABLE,
        EFFECTS_LEDGER_TABLE,
        DEDUPE_TABLE,
    }
)
# The relay's and the schedules' DLQs are "<prefix>-relay-dlq" and "<prefix>-schedules-dlq",
# which queues named "relay" and "schedules" would also claim for their DLQs.
RELAY_DLQ = "relay-dlq"
SCHEDULES_DLQ = "schedules-dlq"
OWN_QUEUES = frozenset({"relay", "schedules"})


def table_env(table: str) -> str:
    """The environment variable carrying a declared table's physical name to the workers."""
    return "CONVEYOR_TABLE_" + table.upper().replace("-", "_")
