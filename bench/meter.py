"""Measure a window of a running local runtime: requests, invocations, outcomes and output, from mark to end.

A window is opened on one queue, jobs are produced, ``wait`` returns once the queue's poller has
deleted them, and ``close`` gathers what happened meanwhile. Windows on one runtime run one after
the other, so what a window saw is its own jobs' (and the idle polling beside them, which the
readers of a window filter by queue and table).
"""

import sys
from dataclasses import dataclass
from pathlib import Path

from bench.counting import Counts, RequestCounter
from bench.local import wait_deleted
from conveyor.local.demo import Observed
from conveyor.local.emf import emf_document, metric_data
from conveyor.local.runtime import LocalRuntime
from conveyor.worker.outcomes import JobOutcome


@dataclass(frozen=True)
class Mark:
    queue: str
    counts: Counts
    deleted: int
    invocations: int
    outcomes: int
    output_offset: int


@dataclass(frozen=True)
class Window:
    """What happened between a mark and the end of its jobs."""

    job_type: str
    queue: str
    jobs: int
    counts: Counts
    invocations: int
    outcomes: tuple[JobOutcome, ...]
    # What the workers wrote to stdout (JSON log lines, EMF documents) meanwhile.
    output: str


def metric_values(output: str) -> int:
    """EMF metric values in ``output``: each value once per dimension set, as CloudWatch stores them."""
    total = 0
    for line in output.splitlines():
        document = emf_document(line)
        if document is not None:
            _, entries = metric_data(document)
            total += sum(len(entry["Values"]) for entry in entries)
    return total


class Meter:
    """Windows over ``runtime``, whose harnesses report to ``observed`` and write their output to ``log``."""

    def __init__(self, runtime: LocalRuntime, observed: Observed, counter: RequestCounter, log: Path) -> None:
        self.runtime = runtime
        self._observed = observed
        self._counter = counter
        self._log = log

    def _output_offset(self) -> int:
        sys.stdout.flush()  # the workers' stdout: the EMF forwarder over the log file, the loggers' stream
        return self._log.stat().st_size

    def mark(self, queue: str) -> Mark:
        poller = self.runtime.pollers[queue]
        with poller.stats.lock:
            done, invocations = poller.stats.deleted, poller.stats.invocations
        with self._observed.lock:
            outcomes = len(self._observed.outcomes)
        return Mark(queue, self._counter.snapshot(), done, invocations, outcomes, self._output_offset())

    def wait(self, mark: Mark, jobs: int, what: str) -> float:
        """Until ``jobs`` messages were deleted from the mark's queue since the mark; returns when."""
        return wait_deleted(self.runtime.pollers[mark.queue], mark.deleted + jobs, what)

    def close(self, mark: Mark, job_type: str, jobs: int) -> Window:
        """The window from ``mark`` to now, once its ``jobs`` are done (``wait``)."""
        poller = self.runtime.pollers[mark.queue]
        counts = self._counter.since(mark.counts)
        end = self._output_offset()
        with self._log.open("rb") as log:
            log.seek(mark.output_offset)
            output = log.read(end - mark.output_offset).decode(errors="replace")
        with self._observed.lock:
            outcomes = tuple(self._observed.outcomes[mark.outcomes :])
        with poller.stats.lock:
            invocations = poller.stats.invocations - mark.invocations
        return Window(job_type, mark.queue, jobs, counts, invocations, outcomes, output)
