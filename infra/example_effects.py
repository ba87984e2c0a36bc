"""The ledger the example jobs' fake providers write to. Delete it with the example jobs."""

from aws_cdk import RemovalPolicy
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from functions.providers.effects import EFFECTS_TABLE_ENV, KEY_ATTRIBUTE

LEDGER_ACTIONS = ("dynamodb:GetItem", "dynamodb:UpdateItem")


class ExampleEffectsTable(Construct):
    def __init__(self, scope: Construct, construct_id: str) -> None:
        super().__init__(scope, construct_id)
        self.table = dynamodb.Table(
            self,
            "Table",
            partition_key=dynamodb.Attribute(name=KEY_ATTRIBUTE, type=dynamodb.AttributeType.STRING),
            billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=True
            ),
            # Example data only: nothing of value is lost when the stack goes.
            removal_policy=RemovalPolicy.DESTROY,
        )

    def grant_to(self, function: lambda_.Function) -> None:
        self.table.grant(function, *LEDGER_ACTIONS)
        function.add_environment(EFFECTS_TABLE_ENV, self.table.table_name)
