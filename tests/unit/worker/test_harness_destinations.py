"""The harness and declared destinations: snoozed when limited, breakers fed by outcomes, retries on a budget.

Real SQS messages on moto run through ``Worker(Harness(...)).handle`` with the shared state in
the provisioned limits table. Assertions are on what an operator sees: which handlers ran, the
outcomes and their reasons, what was re-sent and with which delay, the DLQ, the EMF lines.
"""

import io
import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from botocore.exceptions import ClientError

from conveyor.contract.declarations import JobType, Queue, RetryPolicy
from conveyor.contract.destinations import Breaker, BudgetAction, Destination, RateLimit
from conveyor.contract.errors import RetryableError
from conveyor.contract.job_context import JobContext
from conveyor.contract.payloads import Payload
from conveyor.contract.reasons import Reason, SnoozeReason
from conveyor.contract.topology import Topology
from conveyor.sdk.jobs import job
from conveyor.worker.destinations import budget
from conveyor.worker.destinations.breaker import Breakers, BreakerState
from conveyor.worker.destinations.metrics import BREAKER_OPEN, THROTTLED
from conveyor.worker.destinations.slots import Slots
from conveyor.worker.outcomes import Kind
from tests.aws import Aws
from tests.harness_support import QueueDriver, envelope, receive_count, requests_to

CALLS: list[str] = []
COOL_DOWN = timedelta(seconds=30)
BREAKER_FAILURES = 2
BUDGET = 0.1


class Call(Payload):
    key: str
    fail: bool = False
    retry_after_s: int | None = None


def _service(payload: Call) -> None:
    """The downstream service: records the call, then fails if told to."""
    CALLS.append(payload.key)
    if payload.fail:
        retry_after = timedelta(seconds=payload.retry_after_s) if payload.retry_after_s else None
        raise RetryableError("service unavailable", retry_after=retry_after)


RETRY = RetryPolicy(max_attempts=5, base=timedelta(seconds=1), cap=timedelta(seconds=10))


def declaring(name: str, *destinations: str) -> JobType[Call]:
    """A job type that declares ``destinations`` and makes one call to the service: the run is their call."""

    def handler(payload: Call, ctx: JobContext) -> None:
        _service(payload)

    return job(name, queue="work", model=Call, destinations=destinations, retry=RETRY)(handler)


pay = declaring("pay", "gateway")
pooled = declaring("pooled", "pool")
pooled_probe = declaring("pooled_probe", "flaky", "pool")
budgeted = declaring("budgeted", "budgeted")
patient = declaring("patient", "patient")


@job(queue="work", retry=RETRY)
def fragile(payload: Call, ctx: JobContext) -> None:
    ctx.call("flaky", lambda: _service(payload))


@job(queue="work", destinations=("flaky",), retry=RETRY)
def careful(payload: Call, ctx: JobContext) -> None:
    """Declares the destination and calls it twice, as deliver_webhook does once through its HTTP client."""
    ctx.call("flaky", lambda: _service(payload))
    ctx.call("flaky", lambda: _service(payload))


@job(queue="work", retry=RETRY)
def stray(payload: Call, ctx: JobContext) -> None:
    """Calls a destination nobody declared: a bug in the job, which a deploy fixes."""
    ctx.call("nowhere", lambda: _service(payload))


@job(queue="work", retry=RETRY)
def per_tenant(payload: Call, ctx: JobContext) -> None:
    """Asks for its tenant's token around the call, the key read from the payload."""
    with ctx.limit("tenant"):
        _service(payload)


NO_WAIT = timedelta(0)
TOPOLOGY = Topology(
    queues=(Queue("work", age_objective=timedelta(minutes=5), function_timeout=timedelta(seconds=10)),),
    job_types=(pay, pooled, fragile, careful, pooled_probe, stray, per_tenant, budgeted, patient),
    destinations=(
        Destination("gateway", rate=RateLimit(1, per=timedelta(minutes=1)), max_wait=NO_WAIT),
        Destination("pool", concurrency=1, max_wait=NO_WAIT),
        Destination(
            "flaky",
            breaker=Breaker(failures=BREAKER_FAILURES, window=timedelta(minutes=1), cool_down=COOL_DOWN),
            max_wait=NO_WAIT,
        ),
        Destination("tenant", rate=RateLimit(1, per=timedelta(minutes=1), key="key"), max_wait=NO_WAIT),
        Destination("budgeted", retry_budget=BUDGET),
        Destination("patient", retry_budget=BUDGET, over_budget=BudgetAction.SNOOZE),
    ),
)


@pytest.fixture
def topology() -> Topology:
    return TOPOLOGY


@pytest.fixture(autouse=True)
def calls() -> Iterator[list[str]]:
    CALLS.clear()
    yield CALLS
    CALLS.clear()


@pytest.fixture
def work(aws: Aws) -> QueueDriver:
    return QueueDriver(aws, "work")


def body(job_type: str, key: str, **data: Any) -> str:
    return envelope(job_type, {"key": key, **data})


def outcomes_of(work: QueueDriver, kind: Kind) -> list[str | None]:
    return [outcome.reason for outcome in work.outcomes if outcome.kind is kind]


def test_a_job_over_its_rate_limit_is_snoozed_for_the_refill_without_running_or_spending_an_attempt(
    work: QueueDriver, calls: list[str]
) -> None:
    work.send(body("pay", "first"))
    work.send(body("pay", "second"))
    with requests_to(work.aws.sqs, "SendMessage") as sent:
        failures = work.run(*work.receive())

    assert failures == []  # the snoozed copy is acknowledged: a re-sent copy waits instead
    assert len(calls) == 1
    assert outcomes_of(work, Kind.SNOOZED) == [SnoozeReason.RATE_LIMITED]
    [resent] = sent
    # One token a minute: the next is 60 s away, and the snooze adds up to as much again as jitter.
    assert 60 <= resent["DelaySeconds"] <= 120
    snoozed_key = json.loads(resent["MessageBody"])["data"]["key"]

    work.now += timedelta(seconds=resent["DelaySeconds"])
    work.resend_now(resent)
    assert work.run(work.receive_one()) == []
    assert calls[-1] == snoozed_key
    assert work.outcomes[-1].kind is Kind.SUCCEEDED
    assert work.outcomes[-1].attempt == 1  # the snooze spent no attempt


def test_a_job_finding_every_slot_taken_is_snoozed_and_its_own_slot_is_released_after_it_runs(
    work: QueueDriver, aws: Aws, calls: list[str]
) -> None:
    slots = Slots(aws.dynamodb, aws.provisioned.limits_table)
    assert slots.acquire("pool", 1, "another-worker", expires_at=work.now.timestamp() + 60)

    work.send(body("pooled", "waits"))
    assert work.run(work.receive_one()) == []
    assert calls == []
    assert outcomes_of(work, Kind.SNOOZED) == [SnoozeReason.CONCURRENCY_LIMITED]

    slots.release("pool", "another-worker")
    work.send(body("pooled", "runs"))
    assert work.run(work.receive_one()) == []
    assert calls == ["runs"]
    assert slots.in_use("pool") == 0


def test_service_failures_open_the_breaker_which_snoozes_jobs_without_calling_until_a_probe_succeeds(
    work: QueueDriver, aws: Aws, calls: list[str]
) -> None:
    for index in range(BREAKER_FAILURES):
        work.send(body("fragile", f"fails-{index}", fail=True))
        assert len(work.run(work.receive_one())) == 1  # a retry, scheduled
    assert Breakers(aws.dynamodb, aws.provisioned.limits_table).read("flaky").state is BreakerState.OPEN

    work.send(body("fragile", "while-open"))
    assert work.run(work.receive_one()) == []
    assert "while-open" not in calls
    assert outcomes_of(work, Kind.SNOOZED) == [SnoozeReason.BREAKER_OPEN]

    work.now += COOL_DOWN + timedelta(seconds=1)
    work.send(body("fragile", "probe"))
    assert work.run(work.receive_one()) == []
    assert calls[-1] == "probe"
    assert Breakers(aws.dynamodb, aws.provisioned.limits_table).read("flaky").state is BreakerState.CLOSED


def test_a_job_admitted_as_the_half_open_probe_makes_its_calls_and_its_success_closes_the_breaker(
    work: QueueDriver, aws: Aws, calls: list[str]
) -> None:
    for index in range(BREAKER_FAILURES):
        work.send(body("fragile", f"fails-{index}", fail=True))
        work.run(work.receive_one())
    work.now += COOL_DOWN + timedelta(seconds=1)

    work.send(body("careful", "probe"))
    assert work.run(work.receive_one()) == []
    assert calls[-2:] == ["probe", "probe"]  # admitted once, before the run: its calls are not refused
    assert work.outcomes[-1].kind is Kind.SUCCEEDED
    assert Breakers(aws.dynamodb, aws.provisioned.limits_table).read("flaky").state is BreakerState.CLOSED


def test_with_the_service_failing_every_call_retries_stay_within_the_budget_and_the_rest_are_dead_lettered(
    work: QueueDriver, calls: list[str]
) -> None:
    jobs = 40
    bodies = {f"job-{index}": body("budgeted", f"job-{index}", fail=True) for index in range(jobs)}
    for text in bodies.values():
        work.send(text)
    # First deliveries only: a retry whose short backoff ran out (moto's visibility runs on the wall
    # clock) would spend the budget in the middle, so it is left hidden as if its backoff had not.
    for _ in range(jobs):  # at most a receive per job; the assertion below says if some never ran
        if len(calls) == jobs:
            break
        work.run(*[record for record in work.receive() if receive_count(record) == 1])

    retried = outcomes_of(work, Kind.RETRIED)
    exhausted = [r for r in outcomes_of(work, Kind.DEAD_LETTERED) if r == Reason.RETRY_BUDGET_EXHAUSTED]
    assert len(calls) == jobs
    # One worker sees every count: exactly the budget's share of first attempts, plus the floor.
    assert len(retried) == int(BUDGET * jobs + budget.MIN_RETRIES_PER_WINDOW)
    assert len(retried) + len(exhausted) == jobs
    letters = work.dead_letters()
    assert {letter.attributes["conveyor.reason"] for letter in letters} == {Reason.RETRY_BUDGET_EXHAUSTED}
    assert {letter.body for letter in letters} <= set(bodies.values())  # the original bodies, untouched


def test_over_a_budget_declared_to_snooze_a_retry_waits_about_one_budget_window(work: QueueDriver) -> None:
    # The k-th first failure may retry while k <= BUDGET * k + floor: from about floor / 0.9 on, none may.
    jobs = int(budget.MIN_RETRIES_PER_WINDOW / (1 - BUDGET)) + 5
    for index in range(jobs):
        work.send(body("patient", f"job-{index}", fail=True))
    with requests_to(work.aws.sqs, "ChangeMessageVisibility") as backoffs:
        for _ in range(jobs):  # first deliveries only, as above
            if len(work.outcomes) == jobs:
                break
            work.run(*[record for record in work.receive() if receive_count(record) == 1])

    window = Destination("patient").budget_window.total_seconds()
    delays = [request["VisibilityTimeout"] for request in backoffs]
    assert outcomes_of(work, Kind.DEAD_LETTERED) == []
    assert len(delays) == jobs  # every one retried, none dead-lettered
    assert sum(delay >= window for delay in delays) >= 5  # those over the budget wait a window or more
    assert sum(delay <= RETRY.cap.total_seconds() for delay in delays) >= budget.MIN_RETRIES_PER_WINDOW


def test_a_services_retry_after_sets_the_backoff_when_longer_than_the_jittered_one(work: QueueDriver) -> None:
    work.send(body("pay", "told-to-wait", fail=True, retry_after_s=120))
    with requests_to(work.aws.sqs, "ChangeMessageVisibility") as backoffs:
        assert len(work.run(work.receive_one())) == 1
    assert [request["VisibilityTimeout"] for request in backoffs] == [120]


def test_destination_metrics_name_the_destination_and_the_reason(
    work: QueueDriver, aws: Aws, capsys: pytest.CaptureFixture[str]
) -> None:
    Breakers(aws.dynamodb, aws.provisioned.limits_table).force("flaky", BreakerState.OPEN, reason="incident", by="test")
    work.send(body("fragile", "blocked"))
    work.run(work.receive_one())

    documents = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith('{"_aws"')]
    throttled = [d for d in documents if THROTTLED in d]
    assert {(d["destination"], d.get("reason")) for d in throttled} == {
        ("flaky", None),
        ("flaky", SnoozeReason.BREAKER_OPEN),
    }
    assert any(d.get(BREAKER_OPEN) == [1.0] and d["destination"] == "flaky" for d in documents)


def throttle_limits_table(work: QueueDriver, operation: str) -> None:
    """The limits table answers ``operation`` with a throttle, which moto cannot produce."""
    table = work.aws.provisioned.limits_table

    def refuse(params: dict[str, Any], **_: Any) -> None:
        if params.get("TableName") == table:
            raise ClientError(
                {"Error": {"Code": "ProvisionedThroughputExceededException", "Message": "injected"}}, operation
            )

    work.aws.dynamodb.meta.events.register(f"before-parameter-build.dynamodb.{operation}", refuse)


def test_a_limits_table_that_fails_snoozes_the_job_before_it_runs_spending_no_attempt(
    work: QueueDriver, calls: list[str]
) -> None:
    throttle_limits_table(work, "UpdateItem")
    work.send(body("pay", "while-throttled"))
    assert work.run(work.receive_one()) == []
    assert calls == []
    assert outcomes_of(work, Kind.SNOOZED) == [SnoozeReason.RATE_LIMITED]
    assert outcomes_of(work, Kind.RETRIED) == []


def test_an_override_that_cannot_be_read_leaves_the_declaration_in_force_and_the_job_succeeds(
    work: QueueDriver, calls: list[str]
) -> None:
    throttle_limits_table(work, "GetItem")
    work.send(body("pay", "runs"))
    assert work.run(work.receive_one()) == []
    assert calls == ["runs"]
    assert [outcome.kind for outcome in work.outcomes] == [Kind.SUCCEEDED]


def test_a_job_refused_a_slot_takes_no_half_open_probe_so_the_next_one_probes(
    work: QueueDriver, aws: Aws, calls: list[str]
) -> None:
    for index in range(BREAKER_FAILURES):
        work.send(body("fragile", f"fails-{index}", fail=True))
        work.run(work.receive_one())
    work.now += COOL_DOWN + timedelta(seconds=1)
    slots = Slots(aws.dynamodb, aws.provisioned.limits_table)
    assert slots.acquire("pool", 1, "another-worker", expires_at=work.now.timestamp() + 60)

    work.send(body("pooled_probe", "no-slot"))
    work.run(work.receive_one())
    assert outcomes_of(work, Kind.SNOOZED) == [SnoozeReason.CONCURRENCY_LIMITED]

    slots.release("pool", "another-worker")
    work.send(body("fragile", "probe"))
    assert work.run(work.receive_one()) == []
    assert calls[-1] == "probe"
    assert Breakers(aws.dynamodb, aws.provisioned.limits_table).read("flaky").state is BreakerState.CLOSED


def test_ctx_limit_takes_each_tenants_own_token_from_the_payload(work: QueueDriver, calls: list[str]) -> None:
    for key in ("tenant-a", "tenant-b", "tenant-a"):
        work.send(body("per_tenant", key))
        work.run(work.receive_one())
    assert calls == ["tenant-a", "tenant-b"]  # one token a minute per tenant: b is not held up by a
    assert outcomes_of(work, Kind.SNOOZED) == [SnoozeReason.RATE_LIMITED]


def test_a_call_to_an_undeclared_destination_fails_the_run_naming_it_without_calling(
    work: QueueDriver, calls: list[str], logs: io.StringIO
) -> None:
    work.send(body("stray", "never-sent"))
    assert len(work.run(work.receive_one())) == 1  # retried, as any unclassified error: a deploy fixes it
    assert calls == []
    assert outcomes_of(work, Kind.RETRIED) == ["unexpected"]
    assert "destination 'nowhere' is not declared (declared: budgeted, flaky, gateway, patient, pool, tenant)" in (
        logs.getvalue()
    )
