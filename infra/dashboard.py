"""The one CloudWatch dashboard: a block of rows per queue, from each queue's monitoring, the relays, the schedules,
the destinations."""

from collections.abc import Sequence

from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from conveyor.worker.relay import DEDUPLICATED, FAILED, POISONED, RELAYED
from infra.destination_monitoring import ROW_WIDTH, DestinationMonitoring, error_rate_graph
from infra.job_metrics import PERIOD
from infra.outbox_relay import ITERATOR_AGE_THRESHOLD, MILLISECONDS, OutboxRelay
from infra.queue_monitoring import WIDGET_WIDTH, QueueMonitoring
from infra.schedules import Schedules


class JobsDashboard(Construct):
    def __init__(self, scope: Construct, construct_id: str, *, name: str) -> None:
        super().__init__(scope, construct_id)
        self.dashboard = cloudwatch.Dashboard(self, "Dashboard", dashboard_name=name)

    def add_queue(self, monitoring: QueueMonitoring) -> None:
        for row in monitoring.widgets():
            self.dashboard.add_widgets(*row)

    def add_relays(self, relays: Sequence[OutboxRelay], dlq: sqs.IQueue) -> None:
        """Two rows for every stream relay: how far behind each is, its errors and the relay DLQ; then what each
        relayed, dead-lettered and gave back for Lambda to retry (the relay's own metrics)."""
        self.dashboard.add_widgets(cloudwatch.TextWidget(markdown="## Stream relays", width=3 * WIDGET_WIDTH, height=1))
        threshold_ms = ITERATOR_AGE_THRESHOLD.total_seconds() * MILLISECONDS
        self.dashboard.add_widgets(
            cloudwatch.GraphWidget(
                title="relays: iterator age (ms)",
                left=[relay.iterator_age().with_(label=relay.source) for relay in relays],
                left_annotations=[cloudwatch.HorizontalAnnotation(value=threshold_ms, label="alarm")],
                width=WIDGET_WIDTH,
            ),
            cloudwatch.GraphWidget(
                title="relays: errors",
                left=[relay.function.metric_errors(period=PERIOD, label=relay.source) for relay in relays],
                width=WIDGET_WIDTH,
            ),
            cloudwatch.GraphWidget(
                title="relay DLQ depth",
                left=[dlq.metric_approximate_number_of_messages_visible(period=PERIOD)],
                width=WIDGET_WIDTH,
            ),
        )
        self.dashboard.add_widgets(
            *(
                cloudwatch.GraphWidget(
                    title=title,
                    left=[relay.records(name).with_(label=relay.source) for relay in relays],
                    width=WIDGET_WIDTH,
                )
                for title, name in (
                    ("relays: jobs relayed", RELAYED),
                    ("relays: duplicate enqueues absorbed", DEDUPLICATED),
                    ("relays: poison records dead-lettered", POISONED),
                    ("relays: records given back to retry", FAILED),
                )
            )
        )

    def add_schedules(self, schedules: Schedules) -> None:
        """One row: each schedule's successful runs, the state of their alarms, and the schedules DLQ."""
        self.dashboard.add_widgets(cloudwatch.TextWidget(markdown="## Schedules", width=3 * WIDGET_WIDTH, height=1))
        self.dashboard.add_widgets(
            cloudwatch.GraphWidget(
                title="schedules: successful runs",
                left=[metric.with_(label=name) for name, metric in schedules.succeeded.items()],
                width=WIDGET_WIDTH,
            ),
            cloudwatch.AlarmStatusWidget(
                title="schedules: dead man's switches and DLQ",
                alarms=[*schedules.dead_mans_alarms.values(), schedules.dlq_alarm],
                width=WIDGET_WIDTH,
            ),
            cloudwatch.GraphWidget(
                title="schedules DLQ depth",
                left=[schedules.dlq.metric_approximate_number_of_messages_visible(period=PERIOD)],
                width=WIDGET_WIDTH,
            ),
        )

    def add_destinations(self, monitorings: Sequence[DestinationMonitoring]) -> None:
        """Every destination's error rate against its alarm and the state of their alarms, then a row each."""
        self.dashboard.add_widgets(cloudwatch.TextWidget(markdown="## Destinations", width=ROW_WIDTH, height=1))
        self.dashboard.add_widgets(
            error_rate_graph(monitorings, width=ROW_WIDTH - WIDGET_WIDTH),
            cloudwatch.AlarmStatusWidget(
                title="destinations: breakers open too long, error rates",
                alarms=[alarm for monitoring in monitorings for alarm in monitoring.alarms],
                width=WIDGET_WIDTH,
            ),
        )
        for monitoring in monitorings:
            self.dashboard.add_widgets(*monitoring.widgets())
