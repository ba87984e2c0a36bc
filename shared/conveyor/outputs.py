"""Names of the stack outputs through which tools find a deployed queue's resources.

The stack writes these outputs and the ops CLI reads them, so the naming lives here,
beside the declarations, rather than in either.
"""

QUEUE_URL = "QueueUrl"
DLQ_URL = "DlqUrl"
WORKER_FUNCTION = "WorkerFunction"
EVENT_SOURCE_MAPPING = "EventSourceMapping"
IDEMPOTENCY_TABLE = "IdempotencyTable"
ALARM_TOPIC = "AlarmTopic"


def queue_output_key(queue_name: str, resource: str) -> str:
    """``("bulk-export", QUEUE_URL)`` -> ``"BulkExportQueueUrl"``; output keys are alphanumeric."""
    return "".join(part.capitalize() for part in queue_name.split("-")) + resource
