"""The stream relays: a DynamoDB stream's new items, sent as jobs to the declared queues.

One relay reads the transactional outbox's stream (and this module creates the outbox table);
one more reads each declared table that stream rules watch. They share the code asset, the
mapping settings in ``conveyor.contract.relay_mapping`` (the local stream poller applies the same) and
one relay DLQ, where both Lambda's on-failure records and the relay's own poison records land.
"""

from collections.abc import Mapping
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

from conveyor.contract import naming, relay_mapping
from conveyor.contract.relay_settings import DEDUPE_TABLE_ENV, OUTBOX_SOURCE, RelaySettings
from conveyor.contract.settings import METRICS_NAMESPACE, SERVICE_NAME
from conveyor.sdk import outbox
from conveyor.worker import relay as relay_metrics
from infra.job_queue import DLQ_DEPTH_THRESHOLD, DLQ_RETENTION, METRIC_PERIOD
from infra.worker_package import WorkerPackage

# functions/relay.py in the shared asset, imported as the worker is (functions.worker.handler).
HANDLER = "functions.relay.handler"
# A batch is at most BATCH_SIZE records sent in chunks of 10: seconds, not minutes, within
# relay_mapping.FUNCTION_TIMEOUT.
MEMORY_MB = 256
# The relay is behind when its oldest record in a batch is older than this; Lambda reports
# IteratorAge in milliseconds, once per batch.
ITERATOR_AGE_THRESHOLD = timedelta(minutes=5)
# 3 of the last 5 minutes behind: one slow batch (a bisected poison record, say) is noise.
ITERATOR_AGE_EVALUATION_PERIODS = 5
ITERATOR_AGE_DATAPOINTS_TO_ALARM = 3
MILLISECONDS = 1000
# What the producers' PutItem (alone or inside TransactWriteItems) needs on the outbox.
ENQUEUE_ACTIONS = ("dynamodb:PutItem",)
# Dedupe at enqueue (conveyor.sdk.dedupe): a producer claims a key (PutItem), takes over a stale
# claim or marks it sent (UpdateItem, also inside TransactWriteItems) and frees it (DeleteItem);
# the relay only claims.
DEDUPE_ENQUEUE_ACTIONS = ("dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem")
DEDUPE_RELAY_ACTIONS = ("dynamodb:PutItem", "dynamodb:UpdateItem")


class RelayDeadLetterQueue(Construct):
    """The one DLQ of every relay: poison records with a reason, and Lambda's on-failure metadata.

    No queue redrives into it, so it has no DLQ of its own; its depth alarm pages a human.
    """

    def __init__(self, scope: Construct, construct_id: str, *, prefix: str, alarm_topic: sns.ITopic) -> None:
        super().__init__(scope, construct_id)
        self.queue = sqs.Queue(
            self,
            "Queue",
            queue_name=naming.queue_name(naming.RELAY_DLQ, prefix=prefix),
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            retention_period=DLQ_RETENTION,
        )
        Validations.of(self.queue).acknowledge(
            Acknowledgment(
                id="AwsSolutions::AwsSolutions-SQS3",
                reason="This is the dead-letter queue of the stream relays (their event source mappings' "
                "on-failure destination); nothing consumes it automatically, so it needs no DLQ of its own.",
            )
        )
        self.depth_alarm = cloudwatch.Alarm(
            self,
            "DepthAlarm",
            alarm_description="Stream relays: records are waiting in the relay dead-letter queue",
            metric=self.queue.metric_approximate_number_of_messages_visible(period=METRIC_PERIOD, statistic="Maximum"),
            threshold=DLQ_DEPTH_THRESHOLD,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
            evaluation_periods=1,
            # SQS publishes queue metrics even for an empty queue; a gap is no dead letter.
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        )
        action = cloudwatch_actions.SnsAction(alarm_topic)
        self.depth_alarm.add_alarm_action(action)
        self.depth_alarm.add_ok_action(action)


class OutboxRelay(Construct):
    """One stream, relayed: the outbox table's (``table=None`` creates it) or a declared table's.

    The function's role holds only what its grants add: read this stream, send to the declared
    queues and to the relay DLQ, write its own logs and traces.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        source: str,
        table: dynamodb.ITable | None = None,
        queues: Mapping[str, sqs.IQueue],
        dlq: sqs.IQueue,
        dedupe_table: dynamodb.ITable,
        package: WorkerPackage,
        alarm_topic: sns.ITopic,
        log_retention: logs.RetentionDays,
    ) -> None:
        super().__init__(scope, construct_id)
        if (table is None) != (source == OUTBOX_SOURCE):
            raise ValueError(f"relay {source!r}: the outbox relay creates its table, any other relay is given one")
        self.source = source
        self.table = table if table is not None else self._outbox_table()
        self.dedupe_table = dedupe_table
        self.function = self._function(queues, dlq, package, log_retention)
        self.event_source = event_sources.DynamoEventSource(
            self.table,
            starting_position=lambda_.StartingPosition(relay_mapping.STARTING_POSITION),
            batch_size=relay_mapping.BATCH_SIZE,
            filters=[
                lambda_.FilterCriteria.filter({"eventName": lambda_.FilterRule.is_equal(relay_mapping.EVENT_NAME)})
            ],
            bisect_batch_on_error=relay_mapping.BISECT_ON_ERROR,
            retry_attempts=relay_mapping.MAX_RETRY_ATTEMPTS,
            max_record_age=Duration.seconds(int(relay_mapping.MAX_RECORD_AGE.total_seconds())),
            on_failure=event_sources.SqsDlq(dlq),
            report_batch_item_failures=relay_mapping.REPORT_BATCH_ITEM_FAILURES,
            parallelization_factor=relay_mapping.PARALLELIZATION_FACTOR,
        )
        self.function.add_event_source(self.event_source)
        self.iterator_age_alarm = self._iterator_age_alarm(alarm_topic)

    def _outbox_table(self) -> dynamodb.Table:
        # Like the idempotency table: on demand, recoverable, default encryption. Items expire
        # once the stream (24 h) has surely delivered them.
        return dynamodb.Table(
            self,
            "Table",
            partition_key=dynamodb.Attribute(name=outbox.KEY, type=dynamodb.AttributeType.STRING),
            billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
            time_to_live_attribute=outbox.EXPIRES_AT,
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=True
            ),
            stream=dynamodb.StreamViewType.NEW_IMAGE,
        )

    def _function(
        self,
        queues: Mapping[str, sqs.IQueue],
        dlq: sqs.IQueue,
        package: WorkerPackage,
        log_retention: logs.RetentionDays,
    ) -> lambda_.Function:
        log_group = logs.LogGroup(self, "RelayLogs", retention=log_retention)
        role = iam.Role(self, "RelayRole", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"))
        log_group.grant_write(role)
        settings = RelaySettings(
            source=self.source,
            dlq_url=dlq.queue_url,
            queue_urls={name: queue.queue_url for name, queue in queues.items()},
            dedupe_table=self.dedupe_table.table_name,
        )
        function = package.function(
            self,
            "Relay",
            handler=HANDLER,
            description=f"Conveyor stream relay for {self.source}",
            timeout=Duration.seconds(int(relay_mapping.FUNCTION_TIMEOUT.total_seconds())),
            memory_size=MEMORY_MB,
            role=role,
            log_group=log_group,
            tracing=lambda_.Tracing.ACTIVE,
            environment={
                **settings.to_environment(),
                "POWERTOOLS_SERVICE_NAME": SERVICE_NAME,
                "POWERTOOLS_METRICS_NAMESPACE": METRICS_NAMESPACE,
            },
        )
        # The work queues only, never their DLQs: a relayed job starts its life like any other.
        for queue in queues.values():
            queue.grant_send_messages(function)
        # Poison records, whole and with a reason (the mapping's on-failure grant is the same).
        dlq.grant_send_messages(function)
        # A relayed job with a dedupe key claims it, as a producer's send does.
        self.dedupe_table.grant(function, *DEDUPE_RELAY_ACTIONS)
        Validations.of(role.node.find_child("DefaultPolicy")).acknowledge(
            Acknowledgment(
                id="AwsSolutions::AwsSolutions-IAM5[Resource::*]",
                reason="dynamodb:ListStreams (added with the stream read grant) and X-Ray "
                "PutTraceSegments/PutTelemetryRecords (added for active tracing) support no "
                "resource-level permissions.",
            )
        )
        return function

    def _iterator_age_alarm(self, alarm_topic: sns.ITopic) -> cloudwatch.Alarm:
        threshold = ITERATOR_AGE_THRESHOLD.total_seconds()
        alarm = cloudwatch.Alarm(
            self,
            "IteratorAgeAlarm",
            alarm_description=f"Stream relay {self.source}: records wait more than {threshold:g}s to be relayed",
            metric=self.iterator_age(),
            threshold=threshold * MILLISECONDS,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
            evaluation_periods=ITERATOR_AGE_EVALUATION_PERIODS,
            datapoints_to_alarm=ITERATOR_AGE_DATAPOINTS_TO_ALARM,
            # Lambda reports IteratorAge only for batches it invokes: no writes, no datapoint.
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        )
        action = cloudwatch_actions.SnsAction(alarm_topic)
        alarm.add_alarm_action(action)
        alarm.add_ok_action(action)
        return alarm

    def iterator_age(self) -> cloudwatch.Metric:
        """How old the last record of each batch was when the relay got it, in milliseconds."""
        return self.function.metric("IteratorAge", statistic="Maximum", period=METRIC_PERIOD)

    def records(self, name: str) -> cloudwatch.Metric:
        """One of the relay's own EMF counts (``conveyor.worker.relay``: Relayed, RelayDeduplicated, RelayPoisoned,
        RelayFailed)."""
        return cloudwatch.Metric(
            namespace=METRICS_NAMESPACE,
            metric_name=name,
            dimensions_map={relay_metrics.SOURCE_DIMENSION: self.source},
            statistic="Sum",
            period=METRIC_PERIOD,
        )

    def grant_enqueue(self, function: lambda_.Function) -> None:
        """Let a function enqueue through the outbox, with dedupe keys: both tables' names and their writes."""
        if self.source != OUTBOX_SOURCE:
            raise ValueError(f"relay {self.source!r}: only the outbox relay's table takes jobs")
        function.add_environment(outbox.OUTBOX_TABLE_ENV, self.table.table_name)
        self.table.grant(function, *ENQUEUE_ACTIONS)
        function.add_environment(DEDUPE_TABLE_ENV, self.dedupe_table.table_name)
        self.dedupe_table.grant(function, *DEDUPE_ENQUEUE_ACTIONS)
