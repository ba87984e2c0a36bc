"""The age controller (conveyor.worker.scale_on_age): a function run every minute for the queues that scale on age.

Its role can read the age metric, read and resize exactly those queues' event source mappings, and
add audit rows; nothing else. A run that fails is not retried (the next minute's run is the retry),
and three failed runs in five minutes raise an alarm: a controller that cannot act leaves a backlog
at the last concurrency it set.
"""

from collections.abc import Mapping

from aws_cdk import Acknowledgment, Duration, Validations
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cloudwatch_actions
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sns as sns
from constructs import Construct

from conveyor.contract.scale_settings import ScaleSettings
from conveyor.contract.settings import SERVICE_NAME
from conveyor.worker.audit import WRITE_ACTIONS
from conveyor.worker.scale_on_age import PERIOD
from infra.job_queue import METRIC_PERIOD, JobQueue
from infra.worker_package import WorkerPackage

HANDLER = "functions.scale_on_age.handler"
# One GetMetricData, and a read (and at most one update and one audit row) per queue.
TIMEOUT = Duration.seconds(30)
MEMORY_MB = 128
# What conveyor.worker.scale_on_age.LambdaMappings calls on each mapping.
MAPPING_ACTIONS = ("lambda:GetEventSourceMapping", "lambda:UpdateEventSourceMapping")
# read_ages' one call; CloudWatch has no resource-level permissions for it.
METRIC_ACTIONS = ("cloudwatch:GetMetricData",)
FAILED_RUNS_EVALUATION_PERIODS = 5
FAILED_RUNS_TO_ALARM = 3


class ScaleOnAge(Construct):
    """The controller's function, its every-minute rule and its failure alarm, for ``job_queues`` (those that scale)."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        job_queues: Mapping[str, JobQueue],
        package: WorkerPackage,
        audit_table: dynamodb.ITable,
        alarm_topic: sns.ITopic,
        log_retention: logs.RetentionDays,
    ) -> None:
        super().__init__(scope, construct_id)
        log_group = logs.LogGroup(self, "Logs", retention=log_retention)
        role = iam.Role(self, "Role", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"))
        log_group.grant_write(role)
        role.add_to_policy(
            iam.PolicyStatement(
                actions=list(MAPPING_ACTIONS),
                resources=[job_queue.event_source.event_source_mapping_arn for job_queue in job_queues.values()],
            )
        )
        role.add_to_policy(iam.PolicyStatement(actions=list(METRIC_ACTIONS), resources=["*"]))
        audit_table.grant(role, *WRITE_ACTIONS)
        Validations.of(role.node.find_child("DefaultPolicy")).acknowledge(
            Acknowledgment(
                id="AwsSolutions::AwsSolutions-IAM5[Resource::*]",
                reason="cloudwatch:GetMetricData supports no resource-level permissions; it only reads metrics.",
            )
        )
        settings = ScaleSettings(
            audit_table=audit_table.table_name,
            mappings={name: job_queue.event_source.event_source_mapping_id for name, job_queue in job_queues.items()},
            queue_names={name: job_queue.queue.queue_name for name, job_queue in job_queues.items()},
        )
        self.function = package.function(
            self,
            "Function",
            handler=HANDLER,
            description="Conveyor: raises and lowers the MaximumConcurrency of queues that scale on age",
            timeout=TIMEOUT,
            memory_size=MEMORY_MB,
            role=role,
            log_group=log_group,
            # A failed run is not retried: the next minute's run reads fresh ages, a retry would read stale ones.
            retry_attempts=0,
            environment={**settings.to_environment(), "POWERTOOLS_SERVICE_NAME": SERVICE_NAME},
        )
        self.rule = events.Rule(
            self,
            "EveryMinute",
            description="Conveyor: run the age controller",
            schedule=events.Schedule.rate(Duration.seconds(int(PERIOD.total_seconds()))),
            targets=[targets.LambdaFunction(self.function, retry_attempts=0)],
        )
        self.failures_alarm = cloudwatch.Alarm(
            self,
            "FailedRunsAlarm",
            alarm_description="The age controller keeps failing: queues that scale on age stay at their last "
            "concurrency (see its log group)",
            metric=self.function.metric_errors(period=METRIC_PERIOD, statistic="Sum"),
            threshold=0,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
            evaluation_periods=FAILED_RUNS_EVALUATION_PERIODS,
            datapoints_to_alarm=FAILED_RUNS_TO_ALARM,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        )
        action = cloudwatch_actions.SnsAction(alarm_topic)
        self.failures_alarm.add_alarm_action(action)
        self.failures_alarm.add_ok_action(action)
