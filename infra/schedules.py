"""The declared schedules, deployed: EventBridge Scheduler schedules that enqueue jobs, and their alarms.

One schedule group holds one Scheduler schedule per declaration and shard. Each sends its
shard's envelope template (``conveyor.contract.schedules.schedule_inputs``) to its job's SQS queue, with
a bounded retry policy and a shared DLQ, assuming a role per target queue that may send to that
queue and the DLQ only. Per schedule, a dead man's switch alarms when no successful run has
been recorded for ``DEAD_MANS_INTERVALS`` intervals: the worker writes ``ScheduleSucceeded``
after each one, and a run that never happened writes nothing, which the alarm treats as breaching.
"""

import math
from collections.abc import Mapping
from datetime import timedelta
from typing import Any, NamedTuple

from aws_cdk import Acknowledgment, Aws, Duration, RemovalPolicy, TimeZone, Validations
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cloudwatch_actions
from aws_cdk import aws_iam as iam
from aws_cdk import aws_scheduler as scheduler
from aws_cdk import aws_scheduler_targets as targets
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from conveyor.contract import limits, naming
from conveyor.contract.cron import occurrence_gaps
from conveyor.contract.declarations import JobType
from conveyor.contract.errors import DeclarationError
from conveyor.contract.schedule_inputs import delivery_retry, schedule_inputs
from conveyor.contract.schedules import Schedule
from conveyor.contract.settings import METRICS_NAMESPACE
from conveyor.contract.topology import Topology
from conveyor.worker import metrics
from infra.job_queue import DLQ_DEPTH_THRESHOLD, DLQ_RETENTION, METRIC_PERIOD

SCHEDULER_PRINCIPAL = "scheduler.amazonaws.com"
SCHEDULE_GROUP = "schedules"  # the group is "<prefix>-schedules"

# The dead man's switch fires after this many intervals without a successful run: one interval
# of slack for the queue, the worker's retries and the run itself.
DEAD_MANS_INTERVALS = 2
# PutMetricAlarm: a period is a multiple of 60 s (for standard-resolution metrics); period x
# evaluation periods is at most 7 days, and at most 1 day for a period under 1 hour.
# https://docs.aws.amazon.com/AmazonCloudWatch/latest/APIReference/API_PutMetricAlarm.html
PERIOD_GRANULARITY = timedelta(minutes=1)
MAX_PERIOD = timedelta(days=1)
MAX_EVALUATION_RANGE = timedelta(days=7)
SHORT_PERIOD = timedelta(hours=1)
MAX_SHORT_PERIOD_RANGE = timedelta(days=1)


class AlarmWindow(NamedTuple):
    """A dead man's alarm's period and how many of them in a row must have no successful run."""

    period: timedelta
    evaluation_periods: int


def longest_gap(schedule: Schedule) -> timedelta | None:
    """The longest time between consecutive occurrences, or None for a one-off.

    A clock change stretches one gap a year by an hour, or skips a daily run whose local time does
    not exist that day, which the second interval of the alarm absorbs for hourly and longer
    schedules. Growing every period of the year for it would blunt the alarm the rest of the year.
    """
    return max(occurrence_gaps(schedule), default=None)


def alarm_window(schedule: Schedule) -> AlarmWindow | None:
    """The dead man's alarm of ``schedule``, or None when it has none.

    The interval is the longest gap plus the flexible window (the latest a run may start after
    the previous one); the alarm fires after ``DEAD_MANS_INTERVALS`` intervals without a
    success. Intervals up to a day are one period each; longer ones are counted in 1-day
    periods. None for a one-off schedule, and for one so sparse (more than 6 days between runs)
    that CloudWatch's 7-day evaluation range cannot hold an interval and a period of slack.
    """
    gap = longest_gap(schedule)
    if gap is None:
        return None
    interval = gap + (schedule.flexible_window or timedelta(0))
    period = min(PERIOD_GRANULARITY * math.ceil(interval / PERIOD_GRANULARITY), MAX_PERIOD)
    evaluation_periods = math.ceil(DEAD_MANS_INTERVALS * interval / period)
    limit = MAX_SHORT_PERIOD_RANGE if period < SHORT_PERIOD else MAX_EVALUATION_RANGE
    if period * evaluation_periods > limit:
        evaluation_periods = limit // period
        if period * evaluation_periods < interval + period:
            return None
    return AlarmWindow(period, evaluation_periods)


def scheduler_name(prefix: str, schedule: Schedule, shard: int) -> str:
    """``<prefix>-<schedule>``, plus ``-<shard>`` on a sharded schedule."""
    name = f"{prefix}-{schedule.name}" + (f"-{shard}" if schedule.shards > 1 else "")
    if len(name) > limits.SCHEDULER_MAX_NAME_LENGTH:
        raise DeclarationError(
            f"schedule {schedule.name!r}: its Scheduler name {name!r} has {len(name)} characters, over "
            f"Scheduler's {limits.SCHEDULER_MAX_NAME_LENGTH}; shorten the schedule's name or the prefix"
        )
    return name


def succeeded_metric(schedule: str, period: timedelta, shard: int | None = None) -> cloudwatch.Metric:
    """Successful runs of ``schedule`` (or of one of its shards), as the worker writes them on Lambda
    (conveyor.worker.missed_runs.emit_schedule_succeeded)."""
    dimensions = {metrics.SCHEDULE_DIMENSION: schedule}
    if shard is not None:
        dimensions[metrics.SHARD_DIMENSION] = str(shard)
    return cloudwatch.Metric(
        namespace=METRICS_NAMESPACE,
        metric_name=metrics.SCHEDULE_SUCCEEDED,
        dimensions_map=dimensions,
        statistic="Sum",
        period=Duration.seconds(int(period.total_seconds())),
    )


class Schedules(Construct):
    """Every declared schedule in one group, each shard its own Scheduler schedule; their DLQ and alarms.

    Build it only for a topology that declares schedules.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        topology: Topology,
        prefix: str,
        queues: Mapping[str, sqs.IQueue],
        alarm_topic: sns.ITopic,
    ) -> None:
        super().__init__(scope, construct_id)
        self.group = scheduler.ScheduleGroup(
            self,
            "Group",
            schedule_group_name=f"{prefix}-{SCHEDULE_GROUP}",
            # The schedules are the stack's; a retained group would block redeploying under its name.
            removal_policy=RemovalPolicy.DESTROY,
        )
        self.dlq = self._dlq(prefix)
        self.action = cloudwatch_actions.SnsAction(alarm_topic)
        self.dlq_alarm = self._alarm(
            cloudwatch.Alarm(
                self,
                "DlqDepthAlarm",
                alarm_description="Schedules: invocations Scheduler could not deliver are waiting in the schedules DLQ",
                # Visible messages: what is waiting now, however it got there.
                metric=self.dlq.metric_approximate_number_of_messages_visible(
                    period=METRIC_PERIOD, statistic="Maximum"
                ),
                threshold=DLQ_DEPTH_THRESHOLD,
                comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
                evaluation_periods=1,
                treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
            )
        )
        self.roles: dict[str, iam.Role] = {}
        self.schedules: dict[str, list[scheduler.Schedule]] = {}
        self.dead_mans_alarms: dict[str, cloudwatch.Alarm] = {}
        # A sharded schedule's alarm per shard: one shard that stops succeeding while the others run.
        self.shard_alarms: dict[str, list[cloudwatch.Alarm]] = {}
        self.succeeded: dict[str, cloudwatch.Metric] = {}
        for declaration in topology.schedules:
            job_type = topology.job_type(declaration.job)
            queue = queues[job_type.queue]
            self.schedules[declaration.name] = [
                self._schedule(declaration, job_type, shard, template, prefix=prefix, queue=queue)
                for shard, template in enumerate(schedule_inputs(declaration, job_type))
            ]
            alarm = self._dead_mans_alarm(declaration)
            if alarm is not None:
                self.dead_mans_alarms[declaration.name] = alarm

    def _dlq(self, prefix: str) -> sqs.Queue:
        dlq = sqs.Queue(
            self,
            "Dlq",
            queue_name=naming.queue_name(naming.SCHEDULES_DLQ, prefix=prefix),
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            retention_period=DLQ_RETENTION,
        )
        Validations.of(dlq).acknowledge(
            Acknowledgment(
                id="AwsSolutions::AwsSolutions-SQS3",
                reason="This is the dead-letter queue of the EventBridge Scheduler schedules (their targets' "
                "DeadLetterConfig); nothing consumes it automatically, so it needs no DLQ of its own.",
            )
        )
        return dlq

    def _role(self, queue_name: str) -> iam.Role:
        """The role schedules sending to ``queue_name`` assume; the targets grant it SendMessage."""
        if queue_name not in self.roles:
            self.roles[queue_name] = iam.Role(
                self,
                f"Role-{queue_name}",
                description=f"Assumed by the Conveyor schedules that enqueue jobs on queue {queue_name}",
                assumed_by=iam.ServicePrincipal(
                    SCHEDULER_PRINCIPAL,
                    # Only schedules in this account's group (confused-deputy protection).
                    conditions={
                        "StringEquals": {
                            "aws:SourceAccount": Aws.ACCOUNT_ID,
                            "aws:SourceArn": self.group.schedule_group_arn,
                        }
                    },
                ),
            )
        return self.roles[queue_name]

    def _schedule(
        self,
        declaration: Schedule,
        job_type: JobType[Any],
        shard: int,
        template: str,
        *,
        prefix: str,
        queue: sqs.IQueue,
    ) -> scheduler.Schedule:
        name = scheduler_name(prefix, declaration, shard)
        window = declaration.flexible_window
        retry = delivery_retry(declaration, job_type)
        target = targets.SqsSendMessage(
            queue,
            input=scheduler.ScheduleTargetInput.from_text(template),
            role=self._role(job_type.queue),
            dead_letter_queue=self.dlq,
            retry_attempts=retry.max_retry_attempts,
            max_event_age=Duration.seconds(int(retry.max_event_age.total_seconds())),
        )
        return scheduler.Schedule(
            self,
            f"Schedule-{declaration.name}" + (f"-{shard}" if declaration.shards > 1 else ""),
            schedule_name=name,
            schedule_group=self.group,
            description=f"Conveyor schedule {declaration.name}: enqueues job {job_type.name}"
            + (f" (shard {shard} of {declaration.shards})" if declaration.shards > 1 else ""),
            # Validated at declaration, passed through exactly as declared.
            schedule=scheduler.ScheduleExpression.expression(declaration.expression, TimeZone.of(declaration.timezone)),
            time_window=(
                scheduler.TimeWindow.flexible(Duration.seconds(int(window.total_seconds())))
                if window
                else scheduler.TimeWindow.off()
            ),
            target=target,
        )

    def _dead_mans_alarm(self, declaration: Schedule) -> cloudwatch.Alarm | None:
        window = alarm_window(declaration)
        if window is None:
            return None
        self.succeeded[declaration.name] = succeeded_metric(declaration.name, window.period)
        if declaration.shards > 1:
            self.shard_alarms[declaration.name] = [
                self._no_success_alarm(declaration, window, shard) for shard in range(declaration.shards)
            ]
        return self._no_success_alarm(declaration, window)

    def _no_success_alarm(
        self, declaration: Schedule, window: AlarmWindow, shard: int | None = None
    ) -> cloudwatch.Alarm:
        """``Sum < 1`` for ``window``, missing data breaching: of the schedule, or of one shard of it."""
        which = declaration.name + ("" if shard is None else f" shard {shard}")
        return self._alarm(
            cloudwatch.Alarm(
                self,
                f"DeadMansAlarm-{declaration.name}" + ("" if shard is None else f"-{shard}"),
                alarm_description=f"Schedule {which}: no successful run for {window.evaluation_periods} "
                f"periods of {int(window.period.total_seconds())}s (expected every "
                f"{declaration.expression} in {declaration.timezone})",
                metric=self.succeeded[declaration.name]
                if shard is None
                else succeeded_metric(declaration.name, window.period, shard),
                threshold=1,
                comparison_operator=cloudwatch.ComparisonOperator.LESS_THAN_THRESHOLD,
                evaluation_periods=window.evaluation_periods,
                # A run that never happened writes no data point: that is the failure to catch.
                treat_missing_data=cloudwatch.TreatMissingData.BREACHING,
            )
        )

    def _alarm(self, alarm: cloudwatch.Alarm) -> cloudwatch.Alarm:
        alarm.add_alarm_action(self.action)
        alarm.add_ok_action(self.action)
        return alarm
