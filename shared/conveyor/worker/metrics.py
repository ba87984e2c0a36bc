"""Job metrics as CloudWatch EMF, written with Powertools Metrics.

One namespace, ``Conveyor``; dimensions are the queue and the job type, plus a ``reason`` on
``Retried`` and ``DeadLettered`` (a fixed vocabulary). Never a job id or a tenant: every
distinct dimension value is a billed custom metric. ``Retried`` and ``DeadLettered`` are also
written without the reason, so alarms can watch one metric per job type. ``Discarded`` never
carries its reason: that is the handler's own text, unbounded.
"""

import threading
from datetime import datetime

from aws_lambda_powertools.metrics import EphemeralMetrics, MetricUnit

from conveyor.contract.settings import METRICS_NAMESPACE
from conveyor.worker.outcomes import JobOutcome, Kind

UNREADABLE = "unreadable"  # the job type of a message whose envelope could not be read
QUEUE_WAIT = "QueueWait"
END_TO_END = "EndToEnd"
DURATION = "Duration"
SUCCEEDED = "Succeeded"
RETRIED = "Retried"
DEAD_LETTERED = "DeadLettered"
DISCARDED = "Discarded"
# The dead man's switch: the worker writes 1 per successful scheduled run (per shard), with the
# one dimension `schedule` = the declared schedule's name. The stack alarms per schedule when the
# sum stays below 1, on exactly {schedule}: add no other. A sharded schedule's shard writes it a
# second time on exactly {schedule, shard}, which that shard's own alarm reads.
SCHEDULE_SUCCEEDED = "ScheduleSucceeded"
SCHEDULE_DIMENSION = "schedule"
SHARD_DIMENSION = "shard"
COUNTS = {
    Kind.SUCCEEDED: SUCCEEDED,
    Kind.DUPLICATE: "Duplicate",
    Kind.RETRIED: RETRIED,
    Kind.DEAD_LETTERED: DEAD_LETTERED,
    Kind.SNOOZED: "Snoozed",
    Kind.DEFERRED: "Deferred",
    Kind.DISCARDED: DISCARDED,
}
BY_REASON = frozenset({Kind.RETRIED, Kind.DEAD_LETTERED})
MILLISECONDS = 1000.0

Dimensions = tuple[tuple[str, str], ...]


# Powertools adds a `service` dimension to every document when a service is named (as
# POWERTOOLS_SERVICE_NAME does on Lambda). Alarms and `conveyor stats` match a metric's dimension set
# exactly, so Conveyor's metrics carry only the dimensions named here; an empty service adds none.
NO_SERVICE_DIMENSION = ""


def metric_set(dimensions: Dimensions) -> EphemeralMetrics:
    """A buffer of metrics with exactly ``dimensions``: every Conveyor metric is written through one."""
    metrics = EphemeralMetrics(namespace=METRICS_NAMESPACE, service=NO_SERVICE_DIMENSION)
    for key, value in dimensions:
        metrics.add_dimension(name=key, value=value)
    return metrics


def _ms(start: datetime, end: datetime) -> float:
    return max(0.0, (end - start).total_seconds() * MILLISECONDS)


class MetricBuffer:
    """Metrics buffered per dimension set; ``flush`` writes the EMF lines.

    Powertools writes a document as soon as a metric holds 100 values, so a large batch is
    never lost to EMF's limit; the rest is written by ``flush``, which the worker calls in a
    ``finally`` so that metrics leave even a failed invocation.
    """

    def __init__(self) -> None:
        self._sets: dict[Dimensions, EphemeralMetrics] = {}
        self._lock = threading.Lock()

    def add(self, dimensions: Dimensions, name: str, unit: MetricUnit, value: float) -> None:
        with self._lock:
            metrics = self._sets.get(dimensions)
            if metrics is None:
                metrics = self._sets[dimensions] = metric_set(dimensions)
            metrics.add_metric(name=name, unit=unit, value=value)

    def flush(self) -> None:
        with self._lock:
            sets, self._sets = self._sets, {}
        for metrics in sets.values():
            if metrics.metric_set:  # empty when Powertools already wrote it at 100 values
                metrics.flush_metrics()


class JobMetrics(MetricBuffer):
    """An outcome observer that buffers the job metrics of each outcome until ``flush``."""

    def __call__(self, outcome: JobOutcome) -> None:
        base: Dimensions = (("queue", outcome.queue), ("job_type", outcome.job_type or UNREADABLE))
        self.add(base, COUNTS[outcome.kind], MetricUnit.Count, 1)
        if outcome.kind in BY_REASON and outcome.reason:
            self.add((*base, ("reason", outcome.reason)), COUNTS[outcome.kind], MetricUnit.Count, 1)
        if outcome.started_at is not None:
            self.add(base, DURATION, MetricUnit.Milliseconds, _ms(outcome.started_at, outcome.finished_at))
            if outcome.created_at is not None:
                self.add(base, QUEUE_WAIT, MetricUnit.Milliseconds, _ms(outcome.created_at, outcome.started_at))
        if outcome.kind is Kind.SUCCEEDED and outcome.created_at is not None:
            self.add(base, END_TO_END, MetricUnit.Milliseconds, _ms(outcome.created_at, outcome.finished_at))
