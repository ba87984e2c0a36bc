"""Row 7: DynamoDB requests per call through a destination's shared limits (issue 17, docs/limits.md).

Every request one DynamoDB client makes through the library's own classes (conveyor.worker.destinations:
RateBuckets, Slots, Breakers, RetryBudgets, Overrides, and the whole JobGuard path) is counted by
bench.counting's hook, on in-process moto (``mock_aws``) held to AWS's limits by strict mode, with the
limits table provisioned as the local runtime provisions it. Time is a clock moved by hand, so what is
counted depends only on the calls made and how far apart they are: counted requests, never timings.

Each scenario makes one call on fresh state first (it creates the items, and reads what a worker
caches), counted apart, then ``calls`` more, ``PACE_S`` apart unless it says otherwise; its figure is
the requests of those per call. No anchor: each figure is a count. The one target is docs/limits.md's
promise: one UpdateItem for a token in the common case.
"""

import os
import random
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any
from unittest import mock

import boto3
from moto import mock_aws

from bench.counting import Counts, RequestCounter, builtin_handlers_restored, by_operation, counting
from bench.figures import Figure, Row, Table, Target
from conveyor.contract.declarations import Queue
from conveyor.contract.destinations import Breaker, Destination, RateLimit
from conveyor.contract.job_context import JobContext
from conveyor.contract.payloads import Payload
from conveyor.contract.topology import Topology
from conveyor.local import moto_concurrency, strict
from conveyor.local.demo import worker_logs_to
from conveyor.local.embedded import REGION
from conveyor.local.provision import provision
from conveyor.local.runtime import embedded_environment
from conveyor.sdk.jobs import job
from conveyor.worker.destinations.breaker import Breakers
from conveyor.worker.destinations.budget import RetryBudgets
from conveyor.worker.destinations.guard import DestinationLimits
from conveyor.worker.destinations.overrides import Overrides
from conveyor.worker.destinations.rate import MICROS, RateBuckets
from conveyor.worker.destinations.slots import Slots
from conveyor.worker.destinations.state import OVERRIDE_REFRESH_S, queue_scope

KEY = "limits"
TITLE = "DynamoDB requests per call through a destination's shared limits"
UNIT = "req/call"
# docs/limits.md: "take a token (common case): 1 UpdateItem".
TOKEN_TARGET = Target(1.0, on_ratio=False, unit=UNIT)

# Epoch seconds the clock starts at: a whole number of retry-budget windows, so a run stays in one bucket.
START_S = 1_800_000_000
# Calls 25 a second: half the paced bucket's rate, so no token is ever waited for.
PACE_S = 0.04
# The paced bucket: the project's payments limit (functions/topology.py), without its per-key field.
PACED = RateLimit(50, per=timedelta(seconds=1), burst=10)
# A hot worker: calling a 1000/s bucket at its full rate, a call a millisecond, so it leases tokens.
HOT = RateLimit(1000, per=timedelta(seconds=1), burst=50)
HOT_PACE_S = 0.001
CAP = 10
SLOT_TTL_S = 60.0
# A failure threshold no run reaches: every failed call is counted in a closed breaker.
NEVER_TRIPS = Breaker(failures=1_000_000, window=timedelta(hours=1))
ERROR_RATE = Breaker(error_rate=0.5, min_calls=20)
BATCH = 10
BATCH_PACE_S = 1.0
# The override scenario's calls are spread evenly over this many refresh periods.
OVERRIDE_PERIODS = 4
# A job's invocation ends this long after it starts (the slot's expiry follows it).
JOB_DEADLINE_S = 30.0

QUEUE = Queue("limits-bench", age_objective=timedelta(minutes=1))
PARTNER = Destination("partner", rate=PACED, concurrency=CAP, breaker=Breaker())


class Call(Payload):
    n: int = 0


def call_partner(payload: Call) -> None:
    """The job itself: nothing, so only the guard's requests are counted."""


@job("limits_bench_call", queue=QUEUE.name, model=Call, destinations=(PARTNER.name,))
def limits_bench_call(payload: Call, ctx: JobContext) -> None:
    call_partner(payload)


TOPOLOGY = Topology(queues=(QUEUE,), job_types=(limits_bench_call,), destinations=(PARTNER,))


class Clock:
    """Epoch seconds that move only when told, kept in whole microseconds so paces add up exactly."""

    def __init__(self) -> None:
        self._micros = START_S * MICROS

    def __call__(self) -> float:
        return self._micros / MICROS

    def advance(self, seconds: float) -> None:
        self._micros += round(seconds * MICROS)


# One call of a scenario (the ``index``-th), which also moves the clock on to the next.
Step = Callable[[int], None]
# What a scenario sets up on the client, the limits table and its own clock: its step.
Setup = Callable[[Any, str, Clock], Step]


@dataclass(frozen=True)
class Scenario:
    label: str
    # The figure's name, with the number of calls measured.
    describe: Callable[[int], str]
    setup: Setup
    # Calls each step makes (a batch of jobs is one step); the figure is per call.
    per_step: int = 1
    target: Target | None = None


@dataclass(frozen=True)
class Measured:
    scenario: Scenario
    calls: int
    first: Counts
    rest: Counts

    @property
    def per_call(self) -> float:
        return sum(self.rest.values()) / self.calls


def _take(buckets: RateBuckets, clock: Clock, destination: str, limit: RateLimit) -> None:
    """One token, waiting (on the clock) as long as the bucket says: a denial's requests count for the token."""
    while (wait := buckets.acquire(destination, limit)) > 0:
        clock.advance(wait)


def _token(limit: RateLimit, pace_s: float) -> Setup:
    def setup(client: Any, table: str, clock: Clock) -> Step:
        buckets, destination = RateBuckets(client, table, clock=clock), f"token-{limit.rate}"

        def step(index: int) -> None:
            _take(buckets, clock, destination, limit)
            clock.advance(pace_s)

        return step

    return setup


def _slot(client: Any, table: str, clock: Clock) -> Step:
    slots = Slots(client, table, clock=clock)

    def step(index: int) -> None:
        holder = f"call-{index}"
        if not slots.acquire("slot", CAP, holder, expires_at=clock() + SLOT_TTL_S):
            raise RuntimeError("a slot was refused with every other one free")
        slots.release("slot", holder)
        clock.advance(PACE_S)

    return step


def _breaker(breaker: Breaker, *, ok: bool) -> Setup:
    def setup(client: Any, table: str, clock: Clock) -> Step:
        breakers = Breakers(client, table, clock=clock)
        destination = f"breaker-{'ok' if ok else 'failed'}-{'rate' if breaker.error_rate else 'count'}"

        def step(index: int) -> None:
            admission = breakers.admit(destination, breaker)
            if not admission.allowed:
                raise RuntimeError(f"breaker {destination} opened during the run")
            breakers.record(destination, breaker, ok=ok, probe=admission.probe)
            clock.advance(PACE_S)

        return step

    return setup


def _budget(client: Any, table: str, clock: Clock) -> Step:
    budgets, scope, window = RetryBudgets(client, table, clock=clock), queue_scope(QUEUE.name), QUEUE.budget_window

    def step(index: int) -> None:
        for _ in range(BATCH):
            budgets.count(scope, window, retry=False)
        budgets.flush()
        clock.advance(BATCH_PACE_S)

    return step


def _overrides(calls: int) -> Setup:
    pace_s = OVERRIDE_PERIODS * OVERRIDE_REFRESH_S / calls

    def setup(client: Any, table: str, clock: Clock) -> Step:
        overrides = Overrides(client, table, clock=clock)

        def step(index: int) -> None:
            overrides.get(PARTNER.name)
            clock.advance(pace_s)

        return step

    return setup


def _guarded(client: Any, table: str, clock: Clock) -> Step:
    rng = random.Random(0)  # noqa: S311 - a snooze's jitter, never used here: no job is snoozed
    limits = DestinationLimits(
        TOPOLOGY, QUEUE, dynamodb_client=client, table=table, clock=clock, rng=rng, sleep=clock.advance
    )

    def step(index: int) -> None:
        payload = Call(n=index)
        guard = limits.guard(limits_bench_call, payload, job_id=f"job-{index}", deadline=clock() + JOB_DEADLINE_S)
        with guard.declared():
            call_partner(payload)
        clock.advance(PACE_S)

    return step


def scenarios(calls: int) -> tuple[Scenario, ...]:
    """The scenarios of a run of ``calls`` calls each (batches of BATCH jobs for the retry budget)."""
    per_s = round(1 / PACE_S)
    return (
        Scenario(
            "token, paced",
            lambda n: f"token: one worker at {per_s}/s on a {PACED.rate}/s burst-{PACED.burst} bucket ({n:,} tokens)",
            _token(PACED, PACE_S),
            target=TOKEN_TARGET,
        ),
        Scenario(
            "token, hot worker",
            lambda n: (
                f"token: a hot worker at {HOT.rate}/s on a {HOT.rate}/s burst-{HOT.burst} bucket, leasing "
                f"({n:,} tokens)"
            ),
            _token(HOT, HOT_PACE_S),
        ),
        Scenario("slot", lambda n: f"slot: acquire + release, cap {CAP} ({n:,} calls)", _slot),
        Scenario(
            "breaker, success",
            lambda n: f"breaker counting failures, closed: admit + record a success ({n:,} calls)",
            _breaker(Breaker(), ok=True),
        ),
        Scenario(
            "breaker, failure",
            lambda n: f"breaker counting failures, closed: admit + record a failure ({n:,} calls)",
            _breaker(NEVER_TRIPS, ok=False),
        ),
        Scenario(
            "breaker with error rate, success",
            lambda n: f"breaker with an error rate, closed: admit + record a success ({n:,} calls)",
            _breaker(ERROR_RATE, ok=True),
        ),
        Scenario(
            "retry budget",
            lambda n: f"retry budget: count a first attempt + flush per batch of {BATCH} ({n:,} jobs)",
            _budget,
            per_step=BATCH,
        ),
        Scenario(
            "override",
            lambda n: f"override read: {n:,} calls over {OVERRIDE_PERIODS} refresh periods of {OVERRIDE_REFRESH_S:g} s",
            _overrides(calls),
        ),
        Scenario(
            "job guard",
            lambda n: f"job guard: a job declaring a destination with rate, concurrency and breaker ({n:,} jobs)",
            _guarded,
        ),
    )


@contextmanager
def in_process_aws() -> Iterator[None]:
    """In-process moto held to AWS's limits (strict mode), as the tests' is; nothing reaches a real endpoint.

    Strict mode's and moto_concurrency's installs are idempotent; the hooks they add to botocore's
    BUILTIN_HANDLERS leave with the block (bench.counting.builtin_handlers_restored).
    The workers' output (the guard's EMF lines, a breaker's log) is discarded, as the other rows send it to a file.
    """
    with builtin_handlers_restored():
        strict.install()
        moto_concurrency.install()
        with mock.patch.dict(os.environ, embedded_environment()):
            for name in ("AWS_ENDPOINT_URL", "AWS_PROFILE"):
                os.environ.pop(name, None)
            with mock_aws(), worker_logs_to(Path(os.devnull)):
                yield


def measure(*, calls: int) -> Row:
    """Each scenario's first call, then ``calls`` more, counted by operation."""
    refused_before = len(strict.refused())
    with in_process_aws():
        setup = boto3.session.Session(region_name=REGION)
        table = provision(TOPOLOGY, sqs=setup.client("sqs"), dynamodb=setup.client("dynamodb")).limits_table
        with counting() as counter:
            client = boto3.session.Session(region_name=REGION).client("dynamodb")
            measured = tuple(_measure(scenario, client, table, counter, calls) for scenario in scenarios(calls))
    return row(measured, refused=len(strict.refused()) - refused_before)


def _measure(scenario: Scenario, client: Any, table: str, counter: RequestCounter, calls: int) -> Measured:
    step = scenario.setup(client, table, Clock())
    before = counter.snapshot()
    step(0)
    first = counter.since(before)
    before = counter.snapshot()
    steps = max(1, calls // scenario.per_step)
    for index in range(1, steps + 1):
        step(index)
    return Measured(scenario, steps * scenario.per_step, first, counter.since(before))


def row(measured: tuple[Measured, ...], *, refused: int = 0) -> Row:
    figures = tuple(Figure(m.scenario.describe(m.calls), m.per_call, UNIT, target=m.scenario.target) for m in measured)
    lines = []
    for m in measured:
        first, rest = by_operation(m.first), by_operation(m.rest)
        for operation in sorted(first.keys() | rest.keys()):
            lines.append(
                (
                    m.scenario.label,
                    operation,
                    str(first[operation]),
                    str(rest[operation]),
                    f"{rest[operation] / m.calls:.3f}",
                )
            )
    table = Table(
        "Requests by operation: the first call on fresh state, then the calls measured",
        ("scenario", "request", "requests, first call", "requests, calls measured", UNIT),
        tuple(lines),
    )
    notes = [
        "Anchor: none; each figure is a count of requests, never a timing, on a clock moved by hand "
        f"({round(1 / PACE_S)} calls a second unless the figure says otherwise).",
        "In-process moto with strict mode, the limits table provisioned as the local runtime does; one DynamoDB "
        "client through the library's own classes (conveyor.worker.destinations), every request counted.",
        "Each figure leaves out the first call on fresh state (it creates the items and fills each cache): "
        "the table shows it apart (the retry budget's: its first batch). A job guard's breaker and override reads "
        "are cached for 1 s and 5 s.",
        "The target is docs/limits.md's (issue 17): one UpdateItem for a token in the common case.",
    ]
    if refused:
        notes.append(f"Strict mode refused {refused} request(s) AWS would refuse.")
    data: dict[str, Any] = {
        m.scenario.label: {
            "calls": m.calls,
            "first": dict(by_operation(m.first)),
            "measured": dict(by_operation(m.rest)),
        }
        for m in measured
    }
    return Row(KEY, TITLE, figures, (table,), tuple(notes), data={"scenarios": data, "refused": refused})
