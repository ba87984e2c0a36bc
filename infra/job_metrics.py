"""CloudWatch metric definitions: the harness's EMF metrics and the AWS metrics of one queue.

Kept apart from alarms and widgets (as cdk-monitoring-constructs does), so both read the same
definitions.
"""

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cloudwatch

from conveyor.contract.settings import METRICS_NAMESPACE
from conveyor.worker import metrics as names

PERIOD = Duration.minutes(1)
LATENCY_PERIOD = Duration.minutes(5)


def job_metric(
    name: str, queue: str, job_type: str, *, statistic: str = "Sum", period: Duration = PERIOD
) -> cloudwatch.Metric:
    return cloudwatch.Metric(
        namespace=METRICS_NAMESPACE,
        metric_name=name,
        dimensions_map={"queue": queue, "job_type": job_type},
        statistic=statistic,
        period=period,
    )


def end_to_end(queue: str, job_type: str, percentile: int) -> cloudwatch.Metric:
    return job_metric(names.END_TO_END, queue, job_type, statistic=f"p{percentile}", period=LATENCY_PERIOD)


def by_reason(name: str, queue: str) -> cloudwatch.MathExpression:
    """Every (job type, reason) series of ``name`` on the queue: for dashboards (alarms can't SEARCH)."""
    return cloudwatch.MathExpression(
        expression=(
            f"SEARCH('{{{METRICS_NAMESPACE},job_type,queue,reason}} "
            f'MetricName="{name}" queue="{queue}"\', \'Sum\', {int(PERIOD.to_seconds())})'
        ),
        label=f"{name} by reason",
        period=PERIOD,
    )
