"""One declared queue, deployed: work queue, DLQ, worker function, event source mapping, alarms."""

from dataclasses import dataclass
from datetime import timedelta

from aws_cdk import Acknowledgment, Duration, Validations
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cloudwatch_actions
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_event_sources as event_sources
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from conveyor.contract import limits, naming
from conveyor.contract.declarations import Queue
from conveyor.contract.settings import WorkerSettings
from conveyor.worker import effects
from conveyor.worker.destinations import state as limits_state
from infra.worker_package import HANDLER, WorkerPackage

# Longer than any source queue's retention (declarations keep those under 14 days),
# because a standard queue's message keeps its original enqueue time in the DLQ.
DLQ_RETENTION = Duration.seconds(int(limits.SQS_MAX_RETENTION.total_seconds()))
# SQS publishes queue metrics once a minute.
METRIC_PERIOD = Duration.minutes(1)
# The age alarm fires when 2 of the last 3 minutes broke the objective: one slow minute
# is noise, two in three is a backlog users feel.
AGE_EVALUATION_PERIODS = 3
AGE_DATAPOINTS_TO_ALARM = 2
# What Powertools' DynamoDB idempotency layer calls, and nothing more (no Scan, no batch writes).
IDEMPOTENCY_ACTIONS = ("dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem")
# What conveyor.worker.checkpoints calls: read a run's checkpoint, write it (conditionally for a hand-off), delete it.
CHECKPOINT_ACTIONS = ("dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:DeleteItem")
# What the scheduled-run audit (conveyor.worker.schedule_runs) calls from a worker: a consistent read of a
# schedule's state, and conditional updates that create or advance every item (no PutItem). Its
# scan of a schedule's occurrences is for reports and tests, not workers.
SCHEDULE_RUN_ACTIONS = ("dynamodb:GetItem", "dynamodb:UpdateItem")
# What conveyor.worker.lease calls: conditional updates to acquire, renew and release (never a put or a
# delete: the item keeps its fencing token), a consistent read, and the fence in a transaction.
LEASE_ACTIONS = ("dynamodb:GetItem", "dynamodb:UpdateItem", "dynamodb:ConditionCheckItem")
# Any dead letter needs a human; the DLQ alarm fires on the first visible message.
DLQ_DEPTH_THRESHOLD = 0


def _duration(value: timedelta) -> Duration:
    return Duration.seconds(int(value.total_seconds()))


@dataclass(frozen=True)
class WorkerTables:
    """Conveyor's own tables every worker uses; each is granted exactly the actions its module calls."""

    idempotency: dynamodb.ITable
    checkpoints: dynamodb.ITable
    schedule_runs: dynamodb.ITable
    leases: dynamodb.ITable
    limits: dynamodb.ITable
    ledger: dynamodb.ITable

    def grant_to(self, grantee: iam.IGrantable) -> None:
        self.idempotency.grant(grantee, *IDEMPOTENCY_ACTIONS)
        self.checkpoints.grant(grantee, *CHECKPOINT_ACTIONS)
        self.schedule_runs.grant(grantee, *SCHEDULE_RUN_ACTIONS)
        self.leases.grant(grantee, *LEASE_ACTIONS)
        self.limits.grant(grantee, *limits_state.WORKER_ACTIONS)
        # On the table only: Table.grant would add its indexes as "index/*", and workers never read the index.
        iam.Grant.add_to_principal(
            grantee=grantee, actions=list(effects.WORKER_ACTIONS), resource_arns=[self.ledger.table_arn]
        )


class JobQueue(Construct):
    """Everything one declared ``Queue`` needs to run its jobs, wired with least privilege."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        declaration: Queue,
        prefix: str,
        max_receive_count: int,
        package: WorkerPackage,
        tables: WorkerTables,
        alarm_topic: sns.ITopic,
        log_retention: logs.RetentionDays,
    ) -> None:
        super().__init__(scope, construct_id)
        self.declaration = declaration
        self.dlq = sqs.Queue(
            self,
            "Dlq",
            queue_name=naming.dlq_name(declaration.name, fifo=declaration.fifo, prefix=prefix),
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            retention_period=DLQ_RETENTION,
            fifo=declaration.fifo or None,
        )
        self.queue = sqs.Queue(
            self,
            "Queue",
            queue_name=naming.queue_name(declaration.name, fifo=declaration.fifo, prefix=prefix),
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            retention_period=_duration(declaration.retention),
            visibility_timeout=_duration(declaration.effective_visibility_timeout),
            fifo=declaration.fifo or None,
            dead_letter_queue=sqs.DeadLetterQueue(queue=self.dlq, max_receive_count=max_receive_count),
        )
        self.function = self._worker(package, tables, log_retention)
        self.event_source = event_sources.SqsEventSource(
            self.queue,
            batch_size=declaration.batch_size,
            max_batching_window=_duration(declaration.batching_window) if declaration.batching_window else None,
            max_concurrency=declaration.max_concurrency,
            report_batch_item_failures=True,
        )
        self.function.add_event_source(self.event_source)
        self._alarms(alarm_topic)

    def _worker(
        self, package: WorkerPackage, tables: WorkerTables, log_retention: logs.RetentionDays
    ) -> lambda_.Function:
        declaration = self.declaration
        self.log_group = log_group = logs.LogGroup(self, "WorkerLogs", retention=log_retention)
        # An explicit role instead of the AWSLambdaBasicExecutionRole managed policy, so the
        # function can write to its own log group and nowhere else.
        role = iam.Role(self, "WorkerRole", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"))
        log_group.grant_write(role)
        function = package.function(
            self,
            "Worker",
            handler=HANDLER,
            description=f"Conveyor worker for queue {declaration.name}",
            timeout=_duration(declaration.function_timeout),
            memory_size=declaration.memory_mb,
            reserved_concurrent_executions=declaration.reserved_concurrency,
            role=role,
            log_group=log_group,
            tracing=lambda_.Tracing.ACTIVE,
            environment=WorkerSettings(
                queue=declaration.name,
                queue_url=self.queue.queue_url,
                dlq_url=self.dlq.queue_url,
                idempotency_table=tables.idempotency.table_name,
                checkpoints_table=tables.checkpoints.table_name,
                schedule_runs_table=tables.schedule_runs.table_name,
                leases_table=tables.leases.table_name,
                limits_table=tables.limits.table_name,
                ledger_table=tables.ledger.table_name,
            ).to_environment(),
        )
        # The harness dead-letters with a reason by sending to the DLQ itself, and re-sends
        # snoozed or deferred jobs to its own queue.
        self.dlq.grant_send_messages(function)
        self.queue.grant_send_messages(function)
        tables.grant_to(function)
        # Narrowest scope: the policy CDK fills from the grants above and from active tracing.
        Validations.of(role.node.find_child("DefaultPolicy")).acknowledge(
            Acknowledgment(
                id="AwsSolutions::AwsSolutions-IAM5[Resource::*]",
                reason="X-Ray PutTraceSegments/PutTelemetryRecords support no resource-level permissions; "
                "CDK adds them for active tracing.",
            )
        )
        return function

    def _alarms(self, alarm_topic: sns.ITopic) -> None:
        name = self.declaration.name
        age = cloudwatch.Alarm(
            self,
            "OldestMessageAgeAlarm",
            alarm_description=f"Queue {name}: the oldest message is older than its "
            f"{self.declaration.age_objective.total_seconds():g}s objective",
            metric=self.queue.metric_approximate_age_of_oldest_message(period=METRIC_PERIOD, statistic="Maximum"),
            threshold=self.declaration.age_objective.total_seconds(),
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
            evaluation_periods=AGE_EVALUATION_PERIODS,
            datapoints_to_alarm=AGE_DATAPOINTS_TO_ALARM,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        )
        dlq_depth = cloudwatch.Alarm(
            self,
            "DlqDepthAlarm",
            alarm_description=f"Queue {name}: messages are waiting in the dead-letter queue",
            # Visible messages, not NumberOfMessagesSent: redrive-policy moves don't count as sends.
            metric=self.dlq.metric_approximate_number_of_messages_visible(period=METRIC_PERIOD, statistic="Maximum"),
            threshold=DLQ_DEPTH_THRESHOLD,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
            evaluation_periods=1,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        )
        action = cloudwatch_actions.SnsAction(alarm_topic)
        for alarm in (age, dlq_depth):
            alarm.add_alarm_action(action)
            alarm.add_ok_action(action)
