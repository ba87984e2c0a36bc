"""The chaos run: the local platform under faults, from the outside, as an operator would see it.

The supervisor (this process) starts the embedded AWS in strict mode, provisions the chaos
topology, and runs the workers in a child process (chaos.child) with fault hooks installed.
It produces the plan's jobs in batches (with its own producer-side faults), delivers some of
them again, mixes in the bad-input corpus, SIGKILLs the child at seeded moments and restarts
it, and restarts it too whenever a fault hook crashed it. Then it waits for the queues to
drain and hands what the system recorded to the invariant checker.
"""

import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TextIO

from chaos.corpus import BadInput
from chaos.faults import CRASH_EXIT_CODE, ChaosTables, FaultMix, installed
from chaos.plan import PlannedJob, planned_jobs, redelivered
from chaos.topology import TOPOLOGY
from conveyor.contract.errors import TransactionCanceledError, TransactionConditionError
from conveyor.local.demo import queue_depth
from conveyor.local.embedded import EmbeddedAws
from conveyor.local.provision import Provisioned
from conveyor.local.runtime import LocalRuntime, local_environment
from conveyor.local.strict import refused
from conveyor.sdk.client import JobClient
from functions.orders import ORDERS_TABLE

# Jobs per SendMessageBatch-sized producer step; the supervisor pauses between steps, so kills
# land while work is in flight.
PRODUCE_BATCH = 50
PRODUCE_PAUSE_S = 0.05
# The child says it is ready within this long, or the run fails (a hang, not a speed target).
READY_TIMEOUT_S = 60.0
POLL_S = 0.5
# Everything must have drained this long after the last job was sent: a guard, not a target.
DRAIN_TIMEOUT_S = 600.0
# Queues must read empty this many times in a row: ApproximateNumberOfMessages* are approximate.
EMPTY_READS = 3
STOP_GRACE_S = 15.0
# The producer waits while more than this many messages are queued or in flight: the embedded
# AWS, one Python process, serves about a dozen jobs a second on 2 cores, and a backlog it cannot
# serve would measure its queueing, not recovery from faults.
MAX_BACKLOG = 300
# At least this many SIGKILLs, spread over production and the drain.
MIN_KILLS = 3
# The faults the producer (this process) meets; the rest are the workers'.
PRODUCER_FAULTS = ("send_batch_partial", "transaction_conflict")
# A transaction canceled by a conflict is placed again, as a producer would, up to this many times.
TRANSACT_ATTEMPTS = 20


@dataclass(frozen=True)
class RunSettings:
    seed: int
    jobs: int
    faults: FaultMix
    # The share of delivered jobs sent again as a raw copy, as SQS may deliver a message twice.
    redelivery_rate: float
    kills: int
    workdir: Path
    # The bad inputs to mix in (chaos/bad_inputs.json), those SQS accepts: the others never reach a queue.
    corpus: tuple[BadInput, ...]


@dataclass
class RunRecord:
    """What the supervisor did and saw, for the checker and the report."""

    settings: RunSettings
    endpoint: str = ""
    provisioned: Provisioned | None = None
    # job id -> what must come of it; a duplicate enqueue with a dedupe key gets (and keeps) its first job's id.
    planned: dict[str, PlannedJob] = field(default_factory=dict)
    duplicate_enqueues: int = 0
    redeliveries: int = 0
    transaction_retries: int = 0
    # The bad inputs sent.
    poison: list[BadInput] = field(default_factory=list)
    kills: int = 0
    crashes: int = 0
    generations: int = 0
    produce_s: float = 0.0
    drain_s: float = 0.0
    drained: bool = False
    refusals: list[str] = field(default_factory=list)
    child_exit_codes: list[int] = field(default_factory=list)


class Child:
    """One generation of the worker process; its output goes to the run's folder."""

    def __init__(self, settings: RunSettings, endpoint: str, generation: int) -> None:
        self.generation = generation
        folder = settings.workdir / f"child-{generation}"
        folder.mkdir(parents=True, exist_ok=True)
        self._stdout_path = folder / "stdout.log"
        self._stdout: TextIO = self._stdout_path.open("w")
        self._stderr: TextIO = (folder / "stderr.log").open("w")
        argv = [
            sys.executable,
            "-m",
            "chaos.child",
            "--endpoint",
            endpoint,
            "--seed",
            str(settings.seed),
            "--generation",
            str(generation),
            "--faults",
            settings.faults.to_json(),
            "--events",
            str(settings.workdir / "faults.jsonl"),
        ]
        self.process = subprocess.Popen(argv, stdout=self._stdout, stderr=self._stderr, start_new_session=True)  # noqa: S603

    def wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        ready = f"chaos child {self.generation} ready"
        while ready not in self._stdout_path.read_text().splitlines():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"chaos child {self.generation} did not start (exit {self.process.poll()}); "
                    f"see {self._stdout_path.parent}"
                )
            time.sleep(POLL_S / 5)

    def exited(self) -> int | None:
        return self.process.poll()

    def kill(self) -> int:
        os.killpg(self.process.pid, signal.SIGKILL)
        return self.process.wait()

    def stop(self) -> int:
        """SIGTERM: the child drains and exits; a child that does not is killed (and counted so)."""
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            return self.kill()
        finally:
            self._stdout.close()
            self._stderr.close()


class Supervisor:
    def __init__(self, settings: RunSettings, progress: Callable[[str], None]) -> None:
        self.settings = settings
        self.record = RunRecord(settings)
        self._rng = random.Random(f"{settings.seed}:supervisor")  # noqa: S311 - reproducible chaos, not secrets
        self._progress = progress
        self._child: Child | None = None

    def run(self, server: EmbeddedAws) -> LocalRuntime:
        """The whole run against ``server`` (started by the caller, who checks it before stopping it)."""
        refused_before = len(refused())
        self.record.endpoint = server.endpoint_url
        os.environ.update(local_environment(server.endpoint_url))
        runtime = LocalRuntime(TOPOLOGY, endpoint_url=server.endpoint_url)
        try:
            provisioned = runtime.provision()
            self.record.provisioned = provisioned
            self._restart()
            self._produce(runtime, provisioned)
            self._drain(runtime, provisioned)
        finally:
            if self._child is not None:
                self.record.child_exit_codes.append(self._child.stop())
            self.record.refusals = refused()[refused_before:]
        return runtime

    def _restart(self) -> None:
        self._child = Child(self.settings, self.record.endpoint, self.record.generations)
        self.record.generations += 1
        self._child.wait_ready()

    def _watch(self) -> None:
        """Restart the child if a fault hook crashed it."""
        assert self._child is not None
        code = self._child.exited()
        if code is None:
            return
        self.record.child_exit_codes.append(code)
        if code != CRASH_EXIT_CODE:
            raise RuntimeError(f"chaos child {self._child.generation} exited {code}, not by a fault: a defect")
        self.record.crashes += 1
        self._restart()

    def _kill(self) -> None:
        assert self._child is not None
        self.record.child_exit_codes.append(self._child.kill())
        self.record.kills += 1
        self._progress(f"SIGKILL child {self._child.generation} ({self.record.kills}/{self.settings.kills})")
        self._restart()

    def _kill_points(self, steps: int) -> set[int]:
        """The production steps after which the child is killed: seeded, spread, at least one per third."""
        kills_while_producing = max(0, self.settings.kills - 1)  # the last one lands during the drain
        return set(self._rng.sample(range(1, max(steps, kills_while_producing + 1)), kills_while_producing))

    def _produce(self, runtime: LocalRuntime, provisioned: Provisioned) -> None:
        started = time.monotonic()
        jobs = list(planned_jobs(self.settings.jobs, run=f"s{self.settings.seed}"))
        steps = [jobs[i : i + PRODUCE_BATCH] for i in range(0, len(jobs), PRODUCE_BATCH)]
        kill_after = self._kill_points(len(steps))
        sent: list[tuple[str, PlannedJob]] = []
        tables = ChaosTables.of(provisioned)
        producer_faults = self.settings.faults.only(PRODUCER_FAULTS)
        client = JobClient(
            TOPOLOGY,
            sqs_client=runtime.sqs,
            dynamodb_client=runtime.dynamodb,
            outbox_table=provisioned.outbox_table,
        )
        events = self.settings.workdir / "faults.jsonl"
        # The runtime's clients exist already: botocore copied its handlers when they were made.
        with installed(producer_faults, self._rng, events, tables, clients=(runtime.sqs, runtime.dynamodb)):
            for index, step in enumerate(steps, start=1):
                while self._backlog(runtime, provisioned) > MAX_BACKLOG:
                    self._watch()
                    time.sleep(POLL_S)
                sqs_jobs = [job for job in step if job.order is None]
                orders = [job for job in step if job.order is not None]
                ids = client.enqueue_many(job.request for job in sqs_jobs)
                ids += [self._place(client, provisioned, job) for job in orders]
                for job_id, job in zip(ids, sqs_jobs + orders, strict=True):
                    self.record.duplicate_enqueues += job.duplicate
                    if job_id not in self.record.planned:  # a dedupe key's duplicate gets its first job's id
                        self.record.planned[job_id] = job
                sent.extend((job_id, job) for job_id, job in zip(ids, sqs_jobs, strict=False) if not job.duplicate)
                if index in kill_after:
                    self._kill()
                self._watch()
                time.sleep(PRODUCE_PAUSE_S)
        # The same job again under its own id, as a redelivery by SQS brings it: absorbed by idempotency.
        again = redelivered(sent, self.settings.redelivery_rate, self._rng)
        for start in range(0, len(again), PRODUCE_BATCH):
            chunk = again[start : start + PRODUCE_BATCH]
            client.enqueue_many(replace(job.request, job_id=job_id) for job_id, job in chunk)
            self.record.redeliveries += len(chunk)
        self._send_poison(runtime, provisioned)
        self.record.produce_s = time.monotonic() - started
        self._progress(f"produced {len(jobs)} jobs in {self.record.produce_s:.0f}s")

    def _place(self, client: JobClient, provisioned: Provisioned, job: PlannedJob) -> str:
        """Place the order with its charge in one transaction, again while DynamoDB reports a conflict."""
        assert job.order is not None
        for _ in range(TRANSACT_ATTEMPTS):
            try:
                placement = job.order.placement(provisioned.tables[ORDERS_TABLE.name])
                (job_id,) = client.transact([placement], [job.request])  # as functions.orders.place_order does
                return job_id
            except TransactionConditionError:
                raise
            except TransactionCanceledError:
                self.record.transaction_retries += 1
        raise RuntimeError(f"order {job.order.order_id}: {TRANSACT_ATTEMPTS} transactions canceled in a row")

    def _send_poison(self, runtime: LocalRuntime, provisioned: Provisioned) -> None:
        for entry in self.settings.corpus:
            request: dict[str, Any] = {"QueueUrl": provisioned.queues[entry.queue].url, "MessageBody": entry.body}
            if entry.attributes:
                request["MessageAttributes"] = entry.attributes
            runtime.sqs.send_message(**request)
            self.record.poison.append(entry)

    @staticmethod
    def _backlog(runtime: LocalRuntime, provisioned: Provisioned) -> int:
        """Messages visible, delayed or in flight on the job queues."""
        depths = [queue_depth(runtime.sqs, queue.url) for queue in provisioned.queues.values()]
        return sum(depth.visible + depth.in_flight + depth.delayed for depth in depths)

    def _drain(self, runtime: LocalRuntime, provisioned: Provisioned) -> None:
        started = time.monotonic()
        deadline = started + DRAIN_TIMEOUT_S
        last_kill_at = started + self._rng.uniform(1.0, 5.0)
        empty_reads = 0
        while time.monotonic() < deadline:
            if self.record.kills < self.settings.kills and time.monotonic() >= last_kill_at:
                self._kill()
            self._watch()
            busy = self._backlog(runtime, provisioned)
            empty_reads = empty_reads + 1 if busy == 0 and self.record.kills >= self.settings.kills else 0
            if empty_reads >= EMPTY_READS:
                self.record.drained = True
                break
            time.sleep(POLL_S)
        self.record.drain_s = time.monotonic() - started
        self._progress(f"drained in {self.record.drain_s:.0f}s" if self.record.drained else "did not drain")
