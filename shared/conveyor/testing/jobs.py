"""``run_jobs``: a project's jobs, run in the test's own process through the real harness on in-process moto.

Inside ``with run_jobs() as jobs:`` the process has an AWS of its own (moto's ``mock_aws``, with
strict mode on, so a request AWS would refuse fails here too), provisioned from the topology by
the local runtime's provisioner; every boto3 client made inside reaches it. Nothing runs until
``jobs.drain()``: each declared queue's worker, built as its Lambda function builds it, is handed
what is visible as Lambda's poller hands it over, and the partial batch response is applied.
Idempotency, retries with backoff, classification and dead-lettering are the harness's own.

Time is a clock the test moves: ``jobs.advance(timedelta(minutes=5))`` moves it for the harness,
for moto's visibility timeouts and delays, and for the code under test (time-machine patches
the clock at the C level; ``time.monotonic``, which bounds a job's run, keeps real time). It
starts at ``start`` (or now) and ticks on as usual in between.

On leaving, the environment, the clock and moto's state are what they were before.
"""

import os
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from datetime import UTC, datetime, timedelta
from functools import cache
from typing import Any
from unittest import mock

import boto3
import botocore.loaders
import botocore.session
import time_machine
from moto import mock_aws
from moto.sqs.models import sqs_backends

from conveyor.contract.declarations import JobType
from conveyor.contract.envelope import Envelope, parse_envelope
from conveyor.contract.errors import ContractError, ConveyorError
from conveyor.contract.loader import load_topology
from conveyor.contract.topology import Topology
from conveyor.local import moto_concurrency, strict
from conveyor.local.provision import Provisioned, provision
from conveyor.local.runtime import embedded_environment
from conveyor.local.scheduler import LocalScheduler
from conveyor.ops.dlq_entries import DlqEntry
from conveyor.ops.dlq_scan import read_entries
from conveyor.ops.status import queue_counts
from conveyor.sdk.client import JobClient
from conveyor.sdk.client_context import using_client
from conveyor.testing import sent
from conveyor.testing.queue_worker import QueueWorker
from conveyor.worker.outcomes import JobOutcome, Kind

# The most messages one ``drain`` hands to workers before it gives up on work that never ends.
MAX_DELIVERIES = 1000
# Variables that would send the test's clients anywhere but the in-process moto.
UNSET = ("AWS_ENDPOINT_URL", "AWS_PROFILE")
# A job type, by declaration or by name; None for every type.
Job = JobType[Any] | str | None


class DrainError(ConveyorError):
    """``drain`` delivered ``max_deliveries`` messages and jobs are still pending: work that never ends."""


def _name(job: Job) -> str | None:
    return job.name if isinstance(job, JobType) else job


class Jobs:
    """The jobs of one ``run_jobs`` block: drive them (``drain``, ``advance``) and see what became of them."""

    def __init__(
        self, topology: Topology, provisioned: Provisioned, *, sqs: Any, dynamodb: Any, clock: time_machine.Traveller
    ) -> None:
        self.topology = topology
        self.provisioned = provisioned
        # A client on this block's moto, for ``jobs.client.enqueue("charge_order", {...})``.
        self.client = JobClient(topology, sqs_client=sqs, dynamodb_client=dynamodb)
        # Every record's outcome, in order, as the harness reported it.
        self.outcomes: list[JobOutcome] = []
        self._sqs = sqs
        self._clock = clock
        self._workers = [
            QueueWorker(topology, provisioned, queue.name, sqs=sqs, dynamodb=dynamodb, observer=self.outcomes.append)
            for queue in topology.queues
        ]
        self._work_queues = {queue.url.rsplit("/", 1)[-1] for queue in provisioned.queues.values()}
        self._enqueued: dict[str, Envelope] = {}
        self._scheduler: LocalScheduler | None = None

    # --- time -----------------------------------------------------------------------------------

    def now(self) -> datetime:
        """The clock's time: what the harness, moto and the code under test read as now."""
        return datetime.now(UTC)

    def advance(self, delta: timedelta) -> None:
        """Move the clock forward by ``delta``: retries, delays and snoozes due by then become visible."""
        if delta < timedelta(0):
            raise ValueError(f"the clock only moves forward, not by {delta}")
        self._clock.shift(delta)

    # --- running ----------------------------------------------------------------------------------

    def drain(self, *, advance: bool = True, max_deliveries: int = MAX_DELIVERIES) -> None:
        """Run jobs until no queue has a message visible, nor (with ``advance``) one due later.

        Each round receives from every queue and invokes its worker on what came back. When nothing
        is visible, ``advance`` moves the clock to when the next hidden or delayed message (a retry's
        backoff, a snooze, a delayed job) becomes visible and goes on; ``advance=False`` leaves those
        where they are, for a test to look at them first or to ``advance`` itself. Schedules never
        fire on their own: see ``run_schedule``.

        Raises DrainError, naming what is still pending, once ``max_deliveries`` messages have been
        delivered and more are pending: a job that snoozes or re-enqueues itself without end
        ends here instead of hanging the test.
        """
        delivered = 0
        before = len(self.outcomes)
        while True:
            if delivered >= max_deliveries and (pending := self._pending()):
                raise DrainError(self._describe(delivered, pending, self.outcomes[before:]))
            batch = sum(worker.deliver_batch() for worker in self._workers)
            delivered += batch
            if batch:
                continue
            due = min(moto_concurrency.until_next_visible(self._moto_queue(w.provisioned.url)) for w in self._workers)
            if not advance or due == float("inf"):
                return
            self.advance(timedelta(seconds=due))

    def run_schedule(self, name: str, at: datetime | None = None) -> None:
        """Send the jobs schedule ``name`` sends for its occurrence at ``at`` (default: now), as Scheduler would.

        An ``at`` later than now moves the clock there first; an earlier one is a late delivery, which
        the schedule's missed-run policy judges as in AWS. ``drain`` runs the jobs.
        """
        moment = at or self.now()
        if moment.utcoffset() is None:
            raise ValueError(f"a schedule runs at a timezone-aware time, not {moment}")
        if moment > self.now():
            self.advance(moment - self.now())
        if self._scheduler is None:
            self._scheduler = LocalScheduler(self.topology, sqs=self._sqs, queues=self.provisioned.queues)
        self._scheduler.fire(name, moment)

    # --- what became of the jobs ------------------------------------------------------------------

    def enqueued(self, job: Job = None, /, **fields: Any) -> list[Envelope]:
        """The jobs sent to the work queues so far (each once, however often it was re-sent), in order.

        Only jobs of type ``job``, if given, whose payload has each of ``fields`` with that value,
        as its JSON holds it: ``jobs.enqueued("charge_order", order_id="o1")``.
        """
        name = _name(job)
        return [
            envelope
            for envelope in self._enqueued.values()
            if (name is None or envelope.type == name)
            and all(envelope.data.get(field, _MISSING) == value for field, value in fields.items())
        ]

    def succeeded(self, job: Job = None) -> int:
        """Runs that completed (of ``job``, or of every type)."""
        return self._count(Kind.SUCCEEDED, job)

    def retried(self, job: Job = None) -> int:
        """Attempts that failed and were scheduled to run again after their backoff."""
        return self._count(Kind.RETRIED, job)

    def failed(self, job: Job = None) -> int:
        """Jobs that failed for good: dead-lettered by the harness (``dead_lettered`` says why)."""
        return self._count(Kind.DEAD_LETTERED, job)

    def discarded(self, job: Job = None) -> int:
        """Runs whose handler raised ``Discard``: final, not failed; each outcome's ``reason`` says why."""
        return self._count(Kind.DISCARDED, job)

    def duplicates(self, job: Job = None) -> int:
        """Deliveries absorbed by idempotency: the job had already completed, so its handler did not run."""
        return self._count(Kind.DUPLICATE, job)

    def dead_lettered(self, job: Job = None) -> list[DlqEntry]:
        """What every queue's DLQ holds (of ``job``): each entry's ``reason`` (a conveyor.contract.reasons
        code, or ``receive_limit`` if SQS moved it), error and original ``body``, unchanged."""
        name = _name(job)
        # In-process moto hands a short poll every visible message: no long poll's second of real time.
        dlqs = [worker.provisioned.dlq_url for worker in self._workers]
        entries = [entry for url in dlqs for entry in read_entries(self._sqs, url, wait_s=0)[0]]
        return [entry for entry in entries if name is None or entry.job_type == name]

    # --- internals -----------------------------------------------------------------------------

    def _count(self, kind: Kind, job: Job) -> int:
        name = _name(job)
        return sum(1 for o in self.outcomes if o.kind is kind and (name is None or o.job_type == name))

    def _sent(self, queue_url: str, body: str) -> None:
        if queue_url.rsplit("/", 1)[-1] not in self._work_queues:
            return
        try:
            envelope = parse_envelope(body)
        except ContractError:  # not a job: the harness dead-letters it when it arrives
            return
        self._enqueued.setdefault(envelope.id, envelope)

    def _moto_queue(self, url: str) -> Any:
        account, name = url.rsplit("/", 2)[-2:]
        return sqs_backends[account][self._sqs.meta.region_name].get_queue(name)

    def _pending(self) -> dict[str, dict[str, int]]:
        """Per queue with messages left: how many are visible, in flight and delayed."""
        counts = {worker.declaration.name: queue_counts(self._sqs, worker.provisioned.url) for worker in self._workers}
        return {queue: left for queue, left in counts.items() if any(left.values())}

    @staticmethod
    def _describe(delivered: int, pending: dict[str, dict[str, int]], outcomes: list[JobOutcome]) -> str:
        queues = "; ".join(
            f"{queue}: " + ", ".join(f"{count} {label}" for label, count in counts.items())
            for queue, counts in pending.items()
        )
        common = Counter((o.job_type, o.kind.value) for o in outcomes).most_common(3)
        seen = ", ".join(f"{job_type} {kind} x{count}" for (job_type, kind), count in common)
        return (
            f"drain delivered {delivered} messages and jobs are still pending ({queues}); most outcomes: {seen}. "
            "A job that snoozes or re-enqueues itself without end never drains; drain(max_deliveries=...) "
            "raises the bound for work that is just large"
        )


_MISSING = object()


@cache
def _loader() -> botocore.loaders.Loader:
    """botocore's service models and endpoints, read from its data files once per process: they never change."""
    return botocore.loaders.create_loader()


def _default_session() -> boto3.Session:
    """A new default session, as ``mock_aws`` gives each block, whose clients reuse the parsed models.

    A session of its own parses the endpoints and every service model again: about 0.1 s a block.
    """
    session = botocore.session.get_session()
    session.register_component("data_loader", _loader())
    return boto3.Session(botocore_session=session)


@contextmanager
def run_jobs(topology: Topology | None = None, *, start: datetime | None = None) -> Iterator[Jobs]:
    """Run ``topology``'s jobs (default: the project's, from [tool.conveyor] in pyproject.toml) in this process.

    ``start`` (timezone-aware) is where the clock starts; default now. See the module's docstring.
    """
    declared = topology or load_topology()
    if start is not None and start.utcoffset() is None:
        raise ValueError(f"run_jobs starts the clock at a timezone-aware time, not {start}")
    # Process-wide and idempotent, as tests/conftest.py installs them: before any client is made.
    strict.install()
    moto_concurrency.install()
    sent.install()
    with ExitStack() as stack:
        stack.enter_context(mock.patch.dict(os.environ, embedded_environment()))
        for name in UNSET:
            os.environ.pop(name, None)
        clock = stack.enter_context(time_machine.travel(start or datetime.now(UTC), tick=True))
        stack.enter_context(mock_aws())
        stack.enter_context(mock.patch("boto3.DEFAULT_SESSION", _default_session()))
        sqs = boto3.client("sqs")
        dynamodb = boto3.client("dynamodb")
        provisioned = provision(declared, sqs=sqs, dynamodb=dynamodb)
        # What the stack gives workers and producers: the declared tables' names, the outbox's.
        os.environ.update(provisioned.table_environment())
        jobs = Jobs(declared, provisioned, sqs=sqs, dynamodb=dynamodb, clock=clock)
        stack.enter_context(sent.recording(jobs._sent))
        # A job's own enqueue (``charge_order.enqueue(...)``) goes through this block's client.
        stack.enter_context(using_client(jobs.client))
        yield jobs
