"""Alarms on what users of one queue feel, and the dashboard rows that show it.

Every threshold comes from the declarations: the queue's latency objective and retry-rate
limit, and its event source's maximum concurrency. Every alarm notifies the alarm topic.
"""

from typing import Any

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cloudwatch_actions
from aws_cdk import aws_sns as sns
from constructs import Construct

from conveyor.worker import metrics as names
from infra.job_metrics import PERIOD, by_reason, end_to_end, job_metric
from infra.job_queue import JobQueue

PERCENTILES = (50, 95, 99)
# p99 over 5-minute periods, 2 of 3 above the objective: one slow burst is noise.
LATENCY_EVALUATION_PERIODS = 3
LATENCY_DATAPOINTS = 2
# The retry rate counts only once a minute has this many runs: 1 retry in 2 runs pages nobody.
MIN_RUNS_FOR_RETRY_RATE = 20
RETRY_RATE_PERIODS = 5
# Saturation: above this share of MaximumConcurrency for this many minutes in a row.
SATURATION_SHARE = 0.9
SATURATION_MINUTES = 5
WIDGET_WIDTH = 8
MILLISECONDS = 1000


class QueueMonitoring(Construct):
    """The alarms of one declared queue, its job types and its worker."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        job_queue: JobQueue,
        job_types: tuple[str, ...],
        alarm_topic: sns.ITopic,
    ) -> None:
        super().__init__(scope, construct_id)
        self._job_queue = job_queue
        self._queue = job_queue.declaration
        self._job_types = job_types
        self._action = cloudwatch_actions.SnsAction(alarm_topic)
        self.alarms: list[cloudwatch.Alarm] = []
        for job_type in job_types:
            self._job_alarms(job_type)
        self._worker_alarms()
        for alarm in self.alarms:
            alarm.add_alarm_action(self._action)
            alarm.add_ok_action(self._action)

    def _add(self, construct_id: str, description: str, **props: Any) -> None:
        self.alarms.append(
            cloudwatch.Alarm(
                self,
                construct_id,
                alarm_description=f"Queue {self._queue.name}: {description}",
                comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
                treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
                **props,
            )
        )

    def _job_alarms(self, job_type: str) -> None:
        queue = self._queue.name
        objective = self._queue.effective_latency_objective.total_seconds()
        self._add(
            f"{job_type}-EndToEndP99",
            f"{job_type} p99 enqueue-to-done is above its {objective:g}s objective",
            metric=end_to_end(queue, job_type, 99),
            threshold=objective * MILLISECONDS,
            evaluation_periods=LATENCY_EVALUATION_PERIODS,
            datapoints_to_alarm=LATENCY_DATAPOINTS,
        )
        counts = {
            key: job_metric(name, queue, job_type)
            for key, name in (
                ("ok", names.SUCCEEDED),
                ("retried", names.RETRIED),
                ("dead", names.DEAD_LETTERED),
                ("discarded", names.DISCARDED),
            )
        }
        # Every run that ended: a discard is one too, or a type that discards much would read a higher rate.
        runs = "(FILL(ok, 0) + FILL(retried, 0) + FILL(dead, 0) + FILL(discarded, 0))"
        self._add(
            f"{job_type}-RetryRate",
            f"{job_type} retries more than {self._queue.max_retry_rate:.0%} of its runs",
            metric=cloudwatch.MathExpression(
                expression=f"IF({runs} >= {MIN_RUNS_FOR_RETRY_RATE}, FILL(retried, 0) / {runs}, 0)",
                using_metrics=counts,
                label=f"{job_type} retry rate",
                period=PERIOD,
            ),
            threshold=self._queue.max_retry_rate,
            evaluation_periods=RETRY_RATE_PERIODS,
            datapoints_to_alarm=RETRY_RATE_PERIODS,
        )
        self._any(f"{job_type}-DeadLettered", f"{job_type} jobs were dead-lettered", counts["dead"])

    def _any(self, construct_id: str, description: str, metric: cloudwatch.IMetric) -> None:
        """An alarm on the first occurrence in any minute."""
        self._add(construct_id, description, metric=metric, threshold=0, evaluation_periods=1)

    def _worker_alarms(self) -> None:
        function = self._job_queue.function
        self._any("WorkerErrors", "the worker function failed invocations", function.metric_errors(period=PERIOD))
        self._any("WorkerThrottles", "the worker function was throttled", function.metric_throttles(period=PERIOD))
        ceiling = self._queue.max_concurrency
        self._add(
            "WorkerSaturation",
            f"the worker used over {SATURATION_SHARE:.0%} of its {ceiling} concurrent executions "
            f"for {SATURATION_MINUTES} minutes",
            metric=function.metric("ConcurrentExecutions", statistic="Maximum", period=PERIOD),
            threshold=SATURATION_SHARE * ceiling,
            evaluation_periods=SATURATION_MINUTES,
            datapoints_to_alarm=SATURATION_MINUTES,
        )

    def widgets(self) -> list[list[cloudwatch.IWidget]]:
        """Three dashboard rows: the queue, its jobs' latency and failures, its worker."""
        queue, dlq, function = self._job_queue.queue, self._job_queue.dlq, self._job_queue.function
        name = self._queue.name
        objective_ms = self._queue.effective_latency_objective.total_seconds() * MILLISECONDS
        return [
            [
                cloudwatch.TextWidget(markdown=f"## Queue `{name}`", width=3 * WIDGET_WIDTH, height=1),
            ],
            [
                _graph(
                    f"{name}: depth",
                    [
                        queue.metric_approximate_number_of_messages_visible(period=PERIOD, label="visible"),
                        queue.metric_approximate_number_of_messages_not_visible(period=PERIOD, label="in flight"),
                        queue.metric("ApproximateNumberOfMessagesDelayed", period=PERIOD, label="delayed"),
                    ],
                ),
                _graph(
                    f"{name}: oldest message age (s)",
                    [queue.metric_approximate_age_of_oldest_message(period=PERIOD, statistic="Maximum")],
                    line=(self._queue.age_objective.total_seconds(), "objective"),
                ),
                _graph(f"{name}: DLQ depth", [dlq.metric_approximate_number_of_messages_visible(period=PERIOD)]),
            ],
            [
                _graph(
                    f"{name}: enqueue-to-done (ms)",
                    [
                        end_to_end(name, job_type, p).with_(label=f"{job_type} p{p}")
                        for job_type in self._job_types
                        for p in PERCENTILES
                    ],
                    line=(objective_ms, "p99 objective"),
                ),
                _graph(f"{name}: retries by reason", [by_reason(names.RETRIED, name)]),
                _graph(f"{name}: dead letters by reason", [by_reason(names.DEAD_LETTERED, name)]),
            ],
            [
                _graph(
                    f"{name}: worker concurrency",
                    [function.metric("ConcurrentExecutions", statistic="Maximum", period=PERIOD)],
                    line=(float(self._queue.max_concurrency), "MaximumConcurrency"),
                ),
                _graph(
                    f"{name}: worker errors and throttles",
                    [function.metric_errors(period=PERIOD), function.metric_throttles(period=PERIOD)],
                ),
                _graph(
                    f"{name}: worker duration (ms)",
                    [function.metric_duration(period=PERIOD, statistic=f"p{p}", label=f"p{p}") for p in (50, 99)],
                ),
            ],
        ]


def _graph(
    title: str, metrics: list[cloudwatch.IMetric], *, line: tuple[float, str] | None = None
) -> cloudwatch.GraphWidget:
    annotations = [cloudwatch.HorizontalAnnotation(value=line[0], label=line[1])] if line else None
    return cloudwatch.GraphWidget(
        title=title, left=metrics, width=WIDGET_WIDTH, left_annotations=annotations, period=Duration.minutes(1)
    )
