"""The worker's settings, carried in environment variables the stack sets on each function.

The stack (and the local runtime) build a ``WorkerSettings`` and call ``to_environment``;
the worker calls ``from_environment``. One class owns the variable names on both sides.
"""

from collections.abc import Mapping
from dataclasses import dataclass, fields

from conveyor.contract.errors import DeclarationError

SERVICE_NAME = "conveyor"
METRICS_NAMESPACE = "Conveyor"
# The operations audit table's name, on the functions that write audit rows themselves (the age
# controller, the timed resume).
AUDIT_TABLE_ENV = "CONVEYOR_AUDIT_TABLE"

_ENV_NAMES = {
    "queue": "CONVEYOR_QUEUE",
    "queue_url": "CONVEYOR_QUEUE_URL",
    "dlq_url": "CONVEYOR_DLQ_URL",
    "idempotency_table": "CONVEYOR_IDEMPOTENCY_TABLE",
    "checkpoints_table": "CONVEYOR_CHECKPOINTS_TABLE",
    "schedule_runs_table": "CONVEYOR_SCHEDULE_RUNS_TABLE",
    "leases_table": "CONVEYOR_LEASES_TABLE",
    "limits_table": "CONVEYOR_LIMITS_TABLE",
    "ledger_table": "CONVEYOR_LEDGER_TABLE",
}


@dataclass(frozen=True)
class WorkerSettings:
    queue: str
    queue_url: str
    dlq_url: str
    idempotency_table: str
    checkpoints_table: str
    schedule_runs_table: str
    leases_table: str
    limits_table: str
    ledger_table: str

    def to_environment(self) -> dict[str, str]:
        environment = {_ENV_NAMES[f.name]: getattr(self, f.name) for f in fields(self)}
        environment["POWERTOOLS_SERVICE_NAME"] = SERVICE_NAME
        environment["POWERTOOLS_METRICS_NAMESPACE"] = METRICS_NAMESPACE
        return environment

    @classmethod
    def from_environment(cls, environ: Mapping[str, str]) -> "WorkerSettings":
        missing = [name for name in _ENV_NAMES.values() if not environ.get(name)]
        if missing:
            raise DeclarationError(f"worker environment: missing {', '.join(missing)}")
        return cls(**{field: environ[name] for field, name in _ENV_NAMES.items()})
