"""Job types that do nothing (or only fail), so a benchmark measures the platform around the job, not the job.

They join the project's own declarations (``TOPOLOGY``) on one of its queues, so the worker runs
them with exactly the settings and neighbours it runs the example jobs with.
"""

from dataclasses import replace

from conveyor.contract.errors import RetryableError
from conveyor.contract.job_context import JobContext
from conveyor.contract.payloads import Payload
from conveyor.sdk.jobs import job
from functions.topology import TOPOLOGY

# The queue the throughput and harness benchmarks use: the project's general-purpose one.
QUEUE = "default"


class Nothing(Payload):
    n: int = 0


def do_nothing(payload: Nothing) -> None:
    """The job itself, as both the harness and the raw Powertools anchor run it."""


def fail(payload: Nothing) -> None:
    """A job that fails in a way worth retrying, every time."""
    raise RetryableError(f"bench job {payload.n} fails on purpose")


@job("bench_noop", queue=QUEUE, model=Nothing)
def bench_noop(payload: Nothing, ctx: JobContext) -> None:
    do_nothing(payload)


@job("bench_failing", queue=QUEUE, model=Nothing)
def bench_failing(payload: Nothing, ctx: JobContext) -> None:
    fail(payload)


BENCH_TOPOLOGY = replace(TOPOLOGY, job_types=(*TOPOLOGY.job_types, bench_noop, bench_failing))
