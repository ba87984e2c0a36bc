"""The function that ends a timed pause (conveyor.worker.timed_resume): the target of its one-time schedule.

A Scheduler universal target calling UpdateEventSourceMapping would resume the queue but write no
audit row; this function does both, with a role that can do exactly that and nothing more.
"""

from collections.abc import Sequence

from aws_cdk import Duration
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_logs as logs
from constructs import Construct

from conveyor.contract.settings import AUDIT_TABLE_ENV, SERVICE_NAME
from conveyor.worker.audit import WRITE_ACTIONS
from infra.worker_package import WorkerPackage

HANDLER = "functions.timed_resume.handler"
# One UpdateEventSourceMapping and one PutItem.
TIMEOUT = Duration.seconds(30)
MEMORY_MB = 128


class TimedResumeFunction(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        package: WorkerPackage,
        audit_table: dynamodb.ITable,
        mapping_arns: Sequence[str],
        log_retention: logs.RetentionDays,
    ) -> None:
        super().__init__(scope, construct_id)
        log_group = logs.LogGroup(self, "Logs", retention=log_retention)
        role = iam.Role(self, "Role", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"))
        log_group.grant_write(role)
        role.add_to_policy(
            iam.PolicyStatement(actions=["lambda:UpdateEventSourceMapping"], resources=list(mapping_arns))
        )
        audit_table.grant(role, *WRITE_ACTIONS)
        self.function = package.function(
            self,
            "Function",
            handler=HANDLER,
            description="Conveyor: ends a timed pause of a queue (enables its mapping) and audits the resume",
            timeout=TIMEOUT,
            memory_size=MEMORY_MB,
            role=role,
            log_group=log_group,
            environment={
                AUDIT_TABLE_ENV: audit_table.table_name,
                "POWERTOOLS_SERVICE_NAME": SERVICE_NAME,
            },
        )
