"""The DynamoDB table behind ``ctx.checkpoint``: long jobs' progress, one item per run."""

from aws_cdk import aws_dynamodb as dynamodb
from constructs import Construct

from conveyor import checkpoints


class CheckpointsTable(Construct):
    """On-demand and TTL-expired; point-in-time recoverable, as losing it would restart long jobs from zero."""

    def __init__(self, scope: Construct, construct_id: str) -> None:
        super().__init__(scope, construct_id)
        self.table = dynamodb.Table(
            self,
            "Table",
            partition_key=dynamodb.Attribute(name=checkpoints.KEY, type=dynamodb.AttributeType.STRING),
            billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
            time_to_live_attribute=checkpoints.EXPIRES_AT,
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=True
            ),
        )
