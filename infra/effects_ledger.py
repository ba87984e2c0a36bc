"""The effect ledger's table: what jobs did at their destinations (conveyor.worker.effects).

On demand, with point-in-time recovery (it is the record of which customer was charged or mailed,
with which idempotency key: losing it loses the answer to "did we charge twice?"), items expiring
once no job can retry or be redriven into them and the reconciliation window has passed. The
sparse index holds only effects still intended, so `conveyor reconcile` queries it, never the table.
"""

from aws_cdk import aws_dynamodb as dynamodb
from constructs import Construct

from conveyor.worker import effects


class EffectsLedgerTable(Construct):
    def __init__(self, scope: Construct, construct_id: str) -> None:
        super().__init__(scope, construct_id)
        self.table = dynamodb.Table(
            self,
            "Table",
            partition_key=dynamodb.Attribute(name=effects.KEY, type=dynamodb.AttributeType.STRING),
            billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
            time_to_live_attribute=effects.EXPIRES_AT,
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=True
            ),
        )
        self.table.add_global_secondary_index(
            index_name=effects.PENDING_INDEX,
            partition_key=dynamodb.Attribute(name=effects.PENDING, type=dynamodb.AttributeType.STRING),
            sort_key=dynamodb.Attribute(name=effects.INTENDED_AT, type=dynamodb.AttributeType.NUMBER),
            projection_type=dynamodb.ProjectionType.ALL,
        )
