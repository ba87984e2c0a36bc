"""The DynamoDB tables workers keep their own state in: checkpoints, schedule runs and leases.

Each is keyed on one string attribute that its runtime module names (``conveyor.worker.checkpoints``,
``conveyor.worker.schedule_runs``, ``conveyor.worker.lease``), on demand and point-in-time recoverable:
losing checkpoints restarts long jobs from zero, losing schedule runs forgets which
occurrences ran, losing leases restarts their fencing tokens.
"""

from aws_cdk import aws_dynamodb as dynamodb
from constructs import Construct


class WorkerStateTable(Construct):
    """A worker state table; ``ttl_attribute`` None for items that must never expire on their own.

    ``table_name`` fixes the physical name, for a table producers outside the stack find by name.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        key: str,
        ttl_attribute: str | None,
        table_name: str | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        self.table = dynamodb.Table(
            self,
            "Table",
            table_name=table_name,
            partition_key=dynamodb.Attribute(name=key, type=dynamodb.AttributeType.STRING),
            billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
            time_to_live_attribute=ttl_attribute,
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=True
            ),
        )
