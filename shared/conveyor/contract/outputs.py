"""Names of the stack outputs through which tools find a deployed queue's resources.

The stack writes these outputs and the ops CLI reads them, so the naming lives here,
beside the declarations, rather than in either.
"""

STACK_NAME = "Conveyor"

QUEUE_URL = "QueueUrl"
DLQ_URL = "DlqUrl"
WORKER_FUNCTION = "WorkerFunction"
# The worker's log group, which `conveyor tail` reads.
WORKER_LOG_GROUP = "WorkerLogGroup"
EVENT_SOURCE_MAPPING = "EventSourceMapping"
IDEMPOTENCY_TABLE = "IdempotencyTable"
ALARM_TOPIC = "AlarmTopic"
# Producers write jobs into the outbox table; the stream relays dead-letter into the relay DLQ.
OUTBOX_TABLE = "OutboxTable"
RELAY_DLQ_URL = "RelayDlqUrl"
# What `conveyor` needs beyond the queues: where it records audit rows, and what a timed pause
# uses to resume itself (an EventBridge Scheduler group and the role its schedules assume).
OPS_AUDIT_TABLE = "OpsAuditTable"
# The deployment's name prefix: schedules the CLI creates must carry it (the operator policy says so).
PREFIX = "Prefix"
RESUME_SCHEDULE_GROUP = "ResumeScheduleGroup"
RESUME_SCHEDULE_ROLE = "ResumeScheduleRole"
# The managed policy to attach to whoever runs `conveyor` against this stack.
OPERATOR_POLICY = "OperatorPolicy"
# Scheduled jobs: the group holding the declared schedules (present only when some are declared)
# and the DLQ of their undeliverable invocations; the run audit and the lease tables.
SCHEDULE_GROUP = "ScheduleGroup"
SCHEDULES_DLQ_URL = "SchedulesDlqUrl"
SCHEDULE_RUNS_TABLE = "ScheduleRunsTable"
LEASES_TABLE = "LeasesTable"
# The destinations' shared limits (conveyor.worker.destinations.state), read and overridden by `conveyor limits`.
LIMITS_TABLE = "LimitsTable"
# The function a timed pause's schedule invokes to end it: enables the mapping and audits the resume.
RESUME_FUNCTION = "ResumeFunction"
# Dedupe at enqueue: producers outside the stack need its name (and write access) to send a dedupe_key.
DEDUPE_TABLE = "DedupeTable"
# The effect ledger (conveyor.worker.effects), read and settled by `conveyor reconcile`.
LEDGER_TABLE = "LedgerTable"


def queue_output_key(queue_name: str, resource: str) -> str:
    """``("bulk-export", QUEUE_URL)`` -> ``"BulkExportQueueUrl"``; output keys are alphanumeric."""
    return "".join(part.capitalize() for part in queue_name.split("-")) + resource
