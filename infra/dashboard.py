"""The one CloudWatch dashboard: a block of rows per queue, from each queue's monitoring."""

from aws_cdk import aws_cloudwatch as cloudwatch
from constructs import Construct

from infra.queue_monitoring import QueueMonitoring


class JobsDashboard(Construct):
    def __init__(self, scope: Construct, construct_id: str, *, name: str) -> None:
        super().__init__(scope, construct_id)
        self.dashboard = cloudwatch.Dashboard(self, "Dashboard", dashboard_name=name)

    def add_queue(self, monitoring: QueueMonitoring) -> None:
        for row in monitoring.widgets():
            self.dashboard.add_widgets(*row)
