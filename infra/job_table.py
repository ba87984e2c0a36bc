"""A table declared in the topology for the jobs' own use, granted to every worker."""

from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from conveyor.contract import naming
from conveyor.contract.declarations import Table


class JobTable(Construct):
    """``streamed``: some stream rule reads the table, so it has the NEW_IMAGE stream a relay reads."""

    def __init__(self, scope: Construct, construct_id: str, *, declaration: Table, streamed: bool = False) -> None:
        super().__init__(scope, construct_id)
        self.declaration = declaration
        self.table = dynamodb.Table(
            self,
            "Table",
            partition_key=dynamodb.Attribute(name=declaration.key, type=dynamodb.AttributeType.STRING),
            billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
            time_to_live_attribute=declaration.ttl_attribute,
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=True
            ),
            stream=dynamodb.StreamViewType.NEW_IMAGE if streamed else None,
        )

    def grant_to(self, function: lambda_.Function) -> None:
        """Read and write items, and learn the table's name from the environment."""
        self.table.grant_read_write_data(function)
        function.add_environment(naming.table_env(self.declaration.name), self.table.table_name)
