"""What producers, workers and operators agree on: declarations, the envelope, payload models, errors.

Nothing here creates an AWS client. Modules not exported below (naming, limits, sizes, the
wire formats of attributes and settings) are Conveyor's own plumbing, public to its other
packages only.
"""

from conveyor.contract.declarations import JobType, Queue, RetryPolicy, StreamImage, StreamRule, Table
from conveyor.contract.destinations import Breaker, BudgetAction, Destination, RateLimit
from conveyor.contract.discovery import discover_jobs
from conveyor.contract.effects import EffectRecord, Verdict
from conveyor.contract.envelope import Correlation, Envelope
from conveyor.contract.errors import (
    CheckpointError,
    CheckpointTooLargeError,
    Continued,
    ContractError,
    ConveyorError,
    DeclarationError,
    Discard,
    EnqueueError,
    InvalidJobError,
    JobTimeoutError,
    PermanentError,
    RetryableError,
    Snooze,
    Throttled,
    TransactionCanceledError,
    TransactionConditionError,
)
from conveyor.contract.job_context import JobContext
from conveyor.contract.loader import load_topology
from conveyor.contract.payloads import Payload, sensitive
from conveyor.contract.reasons import Reason, SnoozeReason
from conveyor.contract.schedules import Schedule, catch_up, skip
from conveyor.contract.topology import Topology

__all__ = [
    "Breaker",
    "BudgetAction",
    "CheckpointError",
    "CheckpointTooLargeError",
    "Continued",
    "ContractError",
    "ConveyorError",
    "Correlation",
    "DeclarationError",
    "Destination",
    "Discard",
    "EffectRecord",
    "EnqueueError",
    "Envelope",
    "InvalidJobError",
    "JobContext",
    "JobTimeoutError",
    "JobType",
    "Payload",
    "PermanentError",
    "Queue",
    "RateLimit",
    "Reason",
    "RetryPolicy",
    "RetryableError",
    "Schedule",
    "Snooze",
    "SnoozeReason",
    "StreamImage",
    "StreamRule",
    "Table",
    "Throttled",
    "Topology",
    "TransactionCanceledError",
    "TransactionConditionError",
    "Verdict",
    "catch_up",
    "discover_jobs",
    "load_topology",
    "sensitive",
    "skip",
]
