"""The DynamoDB table behind the harness's Powertools idempotency records."""

from aws_cdk import aws_dynamodb as dynamodb
from constructs import Construct

from conveyor.worker.idempotency import RECORD_KEY, RECORD_TTL


class IdempotencyTable(Construct):
    """On-demand, TTL-expired and point-in-time recoverable: losing it would re-run effects."""

    def __init__(self, scope: Construct, construct_id: str) -> None:
        super().__init__(scope, construct_id)
        self.table = dynamodb.Table(
            self,
            "Table",
            partition_key=dynamodb.Attribute(name=RECORD_KEY, type=dynamodb.AttributeType.STRING),
            billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
            time_to_live_attribute=RECORD_TTL,
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=True
            ),
        )
