"""Alarms on the destinations jobs call, and the dashboard rows that show them.

Per declared destination: an alarm when its circuit breaker stays open longer than its
``Breaker.alarm_after`` (only for a destination with a breaker), and an alarm when too many of
its calls fail. Both notify the alarm topic, on alarm and on recovery, as the queues' alarms do.
The metrics are the worker's (conveyor.worker.destinations.metrics), defined in
``infra/destination_metrics.py``.
"""

import math
from collections.abc import Sequence
from datetime import timedelta

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cloudwatch_actions
from aws_cdk import aws_sns as sns
from constructs import Construct

from conveyor.contract.destinations import Breaker, Destination
from infra import destination_metrics as metrics
from infra.job_metrics import LATENCY_PERIOD, PERIOD

# The breaker alarm reads BreakerOpen's Minimum per minute: 1 only for a minute in which every
# worker that looked found it open. One breaching minute per minute of ``alarm_after``.
BREAKER_PERIOD = timedelta(minutes=1)
# The worker writes BreakerOpen 1 for open, 0 for closed.
BREAKER_OPEN_THRESHOLD = 1
# More than 10% of a destination's calls failing over 5 minutes pages: the same share as a
# queue's default max_retry_rate, since each failed call is a job retried; here the alarm names
# the service rather than the job types that call it.
ERROR_RATE_THRESHOLD = 0.1
# The rate counts only once 5 minutes have this many calls (10 a minute): below it a handful of
# failures swings the rate by tens of percent (1 failure in 2 calls is 50%). A quiet destination
# that fails outright still pages, through its breaker's alarm and its jobs' dead-letter alarms.
MIN_CALLS_FOR_ERROR_RATE = 50
# One 5-minute period: the minimum number of calls already keeps a single bad minute from paging.
ERROR_RATE_EVALUATION_PERIODS = 1
PERCENTILES = (95, 99)
WIDGET_WIDTH = 6
ROW_WIDTH = 24


def breaker_alarm_minutes(breaker: Breaker) -> int:
    """``alarm_after`` in whole minutes (rounded up): the evaluation periods and datapoints of the alarm.

    The declaration keeps it within the day CloudWatch evaluates a 1-minute alarm over.
    """
    return math.ceil(breaker.alarm_after / BREAKER_PERIOD)


class DestinationMonitoring(Construct):
    """The alarms of one declared destination, and its dashboard row."""

    def __init__(
        self, scope: Construct, construct_id: str, *, destination: Destination, alarm_topic: sns.ITopic
    ) -> None:
        super().__init__(scope, construct_id)
        self.destination = destination
        name = destination.name
        self.breaker_alarm: cloudwatch.Alarm | None = None
        if destination.breaker is not None:
            minutes = breaker_alarm_minutes(destination.breaker)
            self.breaker_alarm = cloudwatch.Alarm(
                self,
                "BreakerOpenAlarm",
                alarm_description=f"Destination {name}: its circuit breaker has stayed open for {minutes} minutes, "
                f"so jobs that call {name} are snoozed instead of calling it. Check the service's status, and "
                f"`conveyor limits` for the breaker's state and its last change. Once the service has "
                f"recovered, `conveyor breaker close {name} --reason ...` (a breaker opened by an operator stays "
                f"open until closed).",
                metric=metrics.breaker_open(
                    name, "Minimum", period=Duration.seconds(int(BREAKER_PERIOD.total_seconds()))
                ),
                threshold=BREAKER_OPEN_THRESHOLD,
                comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
                evaluation_periods=minutes,
                datapoints_to_alarm=minutes,
                # No data is a minute no worker looked at the breaker: not evidence it is open.
                treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
            )
        self.error_rate_alarm = cloudwatch.Alarm(
            self,
            "ErrorRateAlarm",
            alarm_description=f"Destination {name}: more than {ERROR_RATE_THRESHOLD:.0%} of its calls failed over "
            f"{int(metrics.ERROR_RATE_PERIOD.to_minutes())} minutes (counted from {MIN_CALLS_FOR_ERROR_RATE} calls): "
            f"timeouts, 5xx or 429 from the service. Check the service's status and `conveyor limits`; "
            f"to stop calling it while it recovers, `conveyor breaker open {name} --reason ...` (jobs are snoozed, "
            f"not failed), then `conveyor breaker close {name} --reason ...`.",
            metric=metrics.error_rate(name, min_calls=MIN_CALLS_FOR_ERROR_RATE),
            threshold=ERROR_RATE_THRESHOLD,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
            evaluation_periods=ERROR_RATE_EVALUATION_PERIODS,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        )
        action = cloudwatch_actions.SnsAction(alarm_topic)
        for alarm in self.alarms:
            alarm.add_alarm_action(action)
            alarm.add_ok_action(action)

    @property
    def alarms(self) -> list[cloudwatch.Alarm]:
        return [alarm for alarm in (self.breaker_alarm, self.error_rate_alarm) if alarm is not None]

    def widgets(self) -> list[cloudwatch.IWidget]:
        """One row: calls and errors, latency p95/p99, throttled jobs, and the breaker's state if it has one."""
        name = self.destination.name
        row: list[cloudwatch.IWidget] = [
            _graph(
                f"{name}: calls and errors",
                [metrics.calls(name).with_(label="calls"), metrics.errors(name).with_(label="errors")],
            ),
            _graph(
                f"{name}: latency p95/p99",
                [metrics.latency(name, p).with_(label=f"p{p}") for p in PERCENTILES],
                period=LATENCY_PERIOD,
            ),
            _graph(
                f"{name}: throttled jobs",
                [metrics.throttled(name).with_(label="throttled"), metrics.throttled_by_reason(name)],
            ),
        ]
        if self.destination.breaker is not None:
            row.append(
                _graph(
                    f"{name}: breaker open (1 = open)",
                    [metrics.breaker_open(name, "Maximum").with_(label="open")],
                )
            )
        return row


def error_rate_graph(monitorings: Sequence[DestinationMonitoring], *, width: int) -> cloudwatch.GraphWidget:
    """Every destination's error rate in one graph, against the alarm's threshold."""
    return cloudwatch.GraphWidget(
        title="destinations: downstream error rate",
        left=[
            metrics.error_rate(m.destination.name, min_calls=MIN_CALLS_FOR_ERROR_RATE, suffix=f"_{index}")
            for index, m in enumerate(monitorings)
        ],
        left_annotations=[cloudwatch.HorizontalAnnotation(value=ERROR_RATE_THRESHOLD, label="alarm")],
        width=width,
        period=metrics.ERROR_RATE_PERIOD,
    )


def _graph(title: str, series: list[cloudwatch.IMetric], *, period: Duration = PERIOD) -> cloudwatch.GraphWidget:
    return cloudwatch.GraphWidget(title=title, left=series, width=WIDGET_WIDTH, period=period)
