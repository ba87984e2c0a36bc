"""Destination metrics as CloudWatch EMF, beside the job metrics (conveyor.worker.metrics).

One dimension, ``destination`` (plus ``reason`` on ``DestinationThrottled``): a declared name,
never a per-key value, since every distinct dimension value is a billed custom metric. The
stack alarms and draws on exactly these names (infra/destination_monitoring.py).
"""

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
