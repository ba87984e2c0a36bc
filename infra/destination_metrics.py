"""CloudWatch metric definitions of the declared destinations, as the worker writes them.

Kept apart from alarms and widgets (as ``infra/job_metrics.py`` is), so both read the same
definitions. Every metric has exactly the one dimension ``destination``; the worker also writes
``DestinationThrottled`` by ``reason``, which only a dashboard ``SEARCH`` reads
(conveyor.worker.destinations.metrics).
"""

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cloudwatch

from conveyor.contract.settings import METRICS_NAMESPACE
from conveyor.worker.destinations import metrics as names
from infra.job_metrics import LATENCY_PERIOD, PERIOD

# The error rate is read over 5 minutes: long enough for a destination called a few times a
# minute to reach the minimum number of calls, short enough to page while a slow outage is young.
ERROR_RATE_PERIOD = Duration.minutes(5)


def destination_metric(
    name: str, destination: str, *, statistic: str = "Sum", period: Duration = PERIOD
) -> cloudwatch.Metric:
    return cloudwatch.Metric(
        namespace=METRICS_NAMESPACE,
        metric_name=name,
        dimensions_map={names.DESTINATION_DIMENSION: destination},
        statistic=statistic,
        period=period,
    )


def calls(destination: str, *, period: Duration = PERIOD) -> cloudwatch.Metric:
    return destination_metric(names.CALLS, destination, period=period)


def errors(destination: str, *, period: Duration = PERIOD) -> cloudwatch.Metric:
    return destination_metric(names.ERRORS, destination, period=period)


def latency(destination: str, percentile: int) -> cloudwatch.Metric:
    return destination_metric(names.LATENCY, destination, statistic=f"p{percentile}", period=LATENCY_PERIOD)


def throttled(destination: str) -> cloudwatch.Metric:
    return destination_metric(names.THROTTLED, destination)


def breaker_open(destination: str, statistic: str, *, period: Duration = PERIOD) -> cloudwatch.Metric:
    """``BreakerOpen``: Minimum is 1 for a minute it stayed open throughout, Maximum 1 if it was open at all."""
    return destination_metric(names.BREAKER_OPEN, destination, statistic=statistic, period=period)


def throttled_by_reason(destination: str) -> cloudwatch.MathExpression:
    """Every reason series of ``DestinationThrottled`` for the destination: for dashboards (alarms can't SEARCH)."""
    return cloudwatch.MathExpression(
        expression=(
            f"SEARCH('{{{METRICS_NAMESPACE},{names.DESTINATION_DIMENSION},{names.REASON_DIMENSION}}} "
            f'MetricName="{names.THROTTLED}" {names.DESTINATION_DIMENSION}="{destination}"\', '
            f"'Sum', {int(PERIOD.to_seconds())})"
        ),
        label=f"{destination} throttled by reason",
        period=PERIOD,
    )


def error_rate(destination: str, *, min_calls: int, suffix: str = "") -> cloudwatch.MathExpression:
    """``DestinationErrors / DestinationCalls`` over ``ERROR_RATE_PERIOD``, 0 below ``min_calls`` calls.

    ``suffix`` keeps the ids of several destinations' expressions apart in one graph.
    """
    calls_id, errors_id = f"calls{suffix}", f"errors{suffix}"
    return cloudwatch.MathExpression(
        expression=f"IF({calls_id} >= {min_calls}, FILL({errors_id}, 0) / {calls_id}, 0)",
        using_metrics={
            calls_id: calls(destination, period=ERROR_RATE_PERIOD),
            errors_id: errors(destination, period=ERROR_RATE_PERIOD),
        },
        label=f"{destination} error rate",
        period=ERROR_RATE_PERIOD,
    )
