"""The embedded AWS and the local runtime, as the benchmarks start, watch and stop them.

Progress is read from the runtime's own counters (its pollers' deleted messages, the outcomes the
harness reports), never by asking the endpoint: a benchmark's watching must not add requests.
"""

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bench.skipped import CannotRunError
from conveyor.contract import naming
from conveyor.contract.topology import Topology
from conveyor.local.demo import Observed, worker_logs_to
from conveyor.local.embedded import EmbeddedAws, LocalRuntimeError, free_port
from conveyor.local.event_source import QueuePoller
from conveyor.local.runtime import LocalRuntime, local_environment

DRAIN_GRACE_S = 5.0
POLL_S = 0.01
# A guard against a hang, not a speed target: the slowest step (1,000 jobs through one queue on
# moto) took about 100 s on 2 busy cores.
WAIT_S = 300.0


def worker_log(workdir: Path) -> Path:
    """Where the workers' stdout (JSON logs, EMF) goes while the embedded AWS runs."""
    return workdir / "worker.log"


@contextmanager
def embedded_aws(workdir: Path) -> Iterator[EmbeddedAws]:
    """A strict embedded AWS on a free port, this process's clients aimed at it, the workers' output in a file."""
    server = EmbeddedAws(free_port(), strict=True)
    try:
        server.start()
    except LocalRuntimeError as error:
        raise CannotRunError(str(error)) from error
    os.environ.update(local_environment(server.endpoint_url))
    try:
        with worker_logs_to(worker_log(workdir)):
            yield server
    finally:
        server.stop()


@contextmanager
def own_resources(prefix: str) -> Iterator[None]:
    """Runtimes made in the block name their queues and tables with ``prefix``.

    A runtime that stopped may still have a long poll waiting on its queues, which would take (and
    give back) the next runtime's messages: a fresh prefix keeps a measurement away from it.
    """
    previous = os.environ.get(naming.PREFIX_ENV)
    os.environ[naming.PREFIX_ENV] = prefix
    try:
        yield
    finally:
        if previous is None:
            del os.environ[naming.PREFIX_ENV]
        else:
            os.environ[naming.PREFIX_ENV] = previous


@contextmanager
def running(runtime: LocalRuntime, workdir: Path) -> Iterator[LocalRuntime]:
    """``runtime`` started, drained afterwards."""
    runtime.start(raw_values=workdir / "metrics.jsonl")
    try:
        yield runtime
    finally:
        runtime.drain(DRAIN_GRACE_S)


def runtime_for(topology: Topology, server: EmbeddedAws, observed: Observed) -> LocalRuntime:
    """A runtime on ``server`` whose harnesses report their outcomes to ``observed``."""
    return LocalRuntime(topology, endpoint_url=server.endpoint_url, observer=observed.record)


def deleted(poller: QueuePoller) -> int:
    with poller.stats.lock:
        return poller.stats.deleted


def wait_deleted(poller: QueuePoller, count: int, what: str) -> float:
    """Wait until ``poller`` has deleted ``count`` messages in all; returns when (``time.monotonic()``)."""
    deadline = time.monotonic() + WAIT_S
    while deleted(poller) < count:
        if time.monotonic() > deadline:
            done = deleted(poller)
            raise CannotRunError(f"{what}: not done within {WAIT_S:.0f}s ({done} of {count} messages deleted)")
        time.sleep(POLL_S)
    return time.monotonic()
