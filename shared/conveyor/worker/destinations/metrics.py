"""Destination metrics as CloudWatch EMF, beside the job metrics (conveyor.worker.metrics).

One dimension, ``destination`` (plus ``reason`` on ``DestinationThrottled``): a declared name,
never a per-key value, since every distinct dimension value is a billed custom metric. The
stack alarms and draws on exactly these names (infra/destination_monitoring.py).
"""

from aws_lambda_powertools.metrics import MetricUnit

from conveyor.worker.metrics import MILLISECONDS, Dimensions, MetricBuffer

DESTINATION_DIMENSION = "destination"
REASON_DIMENSION = "reason"
# Every call made under the destination's limits, the ones that failed (a transient failure: a
# timeout, a 5xx, a 429; a permanent 4xx is the request's fault, not the service's), and how long each took.
CALLS = "DestinationCalls"
ERRORS = "DestinationErrors"
LATENCY = "DestinationLatency"
# Jobs snoozed because the destination could not take them, also by reason (rate_limited, ...).
THROTTLED = "DestinationThrottled"
# 1 each time a worker finds the breaker open (it snoozes a job for it) or opens it, 0 when one closes
# it: the minimum over a minute is 1 only if it stayed open all minute, which the open-too-long alarm counts.
BREAKER_OPEN = "BreakerOpen"


class DestinationMetrics(MetricBuffer):
    """Buffers each destination's calls, throttled jobs and breaker observations until ``flush``."""

    def call(self, destination: str, *, failed: bool, seconds: float) -> None:
        base: Dimensions = ((DESTINATION_DIMENSION, destination),)
        self.add(base, CALLS, MetricUnit.Count, 1)
        self.add(base, ERRORS, MetricUnit.Count, 1 if failed else 0)
        self.add(base, LATENCY, MetricUnit.Milliseconds, max(0.0, seconds * MILLISECONDS))

    def throttled(self, destination: str, reason: str) -> None:
        base: Dimensions = ((DESTINATION_DIMENSION, destination),)
        self.add(base, THROTTLED, MetricUnit.Count, 1)
        self.add((*base, (REASON_DIMENSION, reason)), THROTTLED, MetricUnit.Count, 1)

    def breaker_open(self, destination: str, *, is_open: bool) -> None:
        self.add(((DESTINATION_DIMENSION, destination),), BREAKER_OPEN, MetricUnit.Count, 1 if is_open else 0)
