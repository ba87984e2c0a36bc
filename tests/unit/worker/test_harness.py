"""The harness end to end on moto: each received message is run once, then acked, retried or dead-lettered.

Messages are real SQS messages on moto queues, received and shaped as Lambda delivers them, and
run through ``Worker(Harness(...)).handle``. Assertions are on what an operator sees: the partial
batch response, the DLQ's bodies and attributes, messages re-sent or hidden for backoff, and the
effects the example providers record.
"""

import json
import math
import random
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import pytest
from aws_lambda_powertools.utilities.idempotency import DynamoDBPersistenceLayer, IdempotencyConfig
from botocore.stub import Stubber
from pydantic import Field

from conveyor.contract import limits
from conveyor.contract import message_attributes as attrs
from conveyor.contract.declarations import Queue, RetryPolicy
from conveyor.contract.errors import PermanentError, Snooze
from conveyor.contract.job_context import JobContext
from conveyor.contract.payloads import MASK, Payload
from conveyor.contract.reasons import Reason
from conveyor.contract.topology import Topology
from conveyor.sdk.jobs import job
from conveyor.worker.idempotency import KEY_PREFIX, RECORD_KEY, RECORD_TTL
from functions.jobs.deliver_webhook import Webhook
from functions.providers.effects import Effect, EffectsLedger
from functions.topology import TOPOLOGY
from tests.aws import Aws, moto_aws
from tests.harness_support import (
    DEFAULT_AGE,
    DEFAULT_SEED,
    FIXED_NOW,
    DeadLetter,
    QueueDriver,
    Record,
    envelope,
    first_receive_time,
    parse_timestamp,
    receive_count,
    requests_to,
    string_attributes,
)

# --- a test-only topology: a standard queue and a FIFO queue, with scriptable jobs ------------

STEP_RETRY = RetryPolicy(
    max_attempts=3, base=timedelta(seconds=10), cap=timedelta(minutes=5), max_wall_time=timedelta(hours=6)
)
# Explicit, and well under the queues' 10s function timeout, so several records fit one invocation.
STEP_TIMEOUT = timedelta(seconds=5)
SLOW_STEP_TIMEOUT = timedelta(seconds=0.2)
TINY_MAX_PAYLOAD_BYTES = 256

# (payload key, attempt) of every handler run, in order; cleared before each test.
RUNS: list[tuple[str, int]] = []


class FlakyError(Exception):
    """An exception no job declares: the harness retries it."""


class LedgerRejectedError(Exception):
    """Declared in ``permanent_on`` of the step jobs: dead-lettered at once."""


class Step(Payload):
    """What the step job does when it runs: fail its first ``fail_attempts`` attempts, then snooze or finish."""

    key: str = Field(min_length=1)
    fail_attempts: int = 0
    snooze_s: float = 0
    snoozes: int | None = None  # snooze on the first this many runs only; None: on every run
    outcome: Literal["succeed", "permanent", "declared_permanent"] = "succeed"
    count: int = 0  # sent as "5" to show strict validation


class LedgerEntry(Payload):
    key: str
    currency: str


def perform_step(payload: Step, ctx: JobContext) -> None:
    RUNS.append((payload.key, ctx.attempt))
    if ctx.attempt <= payload.fail_attempts:
        raise FlakyError(f"{payload.key} failed on attempt {ctx.attempt}")
    if payload.snooze_s and (
        payload.snoozes is None or len([run for run in RUNS if run[0] == payload.key]) <= payload.snoozes
    ):
        raise Snooze(timedelta(seconds=payload.snooze_s))
    if payload.outcome == "permanent":
        raise PermanentError(f"{payload.key} can never succeed")
    if payload.outcome == "declared_permanent":
        raise LedgerRejectedError(f"{payload.key} was rejected")


step = job(
    "step",
    queue="standard",
    model=Step,
    retry=STEP_RETRY,
    timeout=STEP_TIMEOUT,
    permanent_on=(LedgerRejectedError,),
)(perform_step)
ordered_step = job("ordered_step", queue="ordered", model=Step, retry=STEP_RETRY, timeout=STEP_TIMEOUT)(perform_step)
biggest = job(
    "biggest", queue="standard", model=Step, timeout=STEP_TIMEOUT, max_payload_bytes=limits.MAX_PAYLOAD_BYTES
)(perform_step)
tiny = job("tiny", queue="standard", model=Step, timeout=STEP_TIMEOUT, max_payload_bytes=TINY_MAX_PAYLOAD_BYTES)(
    perform_step
)


@job("slow_step", queue="standard", model=Step, retry=STEP_RETRY, timeout=SLOW_STEP_TIMEOUT)
def slow_step(payload: Step, ctx: JobContext) -> None:
    """Hangs far past its 0.2s timeout on the first attempt; finishes at once after that."""
    RUNS.append((payload.key, ctx.attempt))
    if ctx.attempt == 1:
        time.sleep(2)


@job(
    "ledger_entry",
    queue="standard",
    model=LedgerEntry,
    version=3,
    upcasters={2: lambda data: {**data, "currency": "EUR"}},
    timeout=STEP_TIMEOUT,
)
def ledger_entry(payload: LedgerEntry, ctx: JobContext) -> None:
    """At v3 with an upcaster from v2 only: v1 is too old, v4 too new."""
    RUNS.append((payload.key, ctx.attempt))


@job("leaky_webhook", queue="standard", model=Webhook, timeout=STEP_TIMEOUT)
def leaky_webhook(payload: Webhook, ctx: JobContext) -> None:
    """Quotes its sensitive ``body`` in the error, as careless handlers do."""
    raise PermanentError(f"receiver rejected body {payload.body}")


TEST_TOPOLOGY = Topology(
    queues=(
        Queue("standard", age_objective=timedelta(minutes=5), function_timeout=timedelta(seconds=10)),
        Queue("ordered", age_objective=timedelta(minutes=5), function_timeout=timedelta(seconds=10), fifo=True),
    ),
    job_types=(step, ordered_step, biggest, tiny, slow_step, ledger_entry, leaky_webhook),
)


def step_body(key: str, **data: Any) -> str:
    return envelope("step", {"key": key, **data})


# --- fixtures ---------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def runs() -> Iterator[list[tuple[str, int]]]:
    RUNS.clear()
    yield RUNS
    RUNS.clear()


@pytest.fixture
def topology() -> Topology:
    return TEST_TOPOLOGY


@pytest.fixture
def standard(aws: Aws) -> QueueDriver:
    return QueueDriver(aws, "standard")


@pytest.fixture
def ordered(aws: Aws) -> QueueDriver:
    return QueueDriver(aws, "ordered")


@pytest.fixture
def app_aws() -> Iterator[Aws]:
    """The project's own topology and example jobs."""
    yield from moto_aws(TOPOLOGY)


@pytest.fixture
def default_queue(app_aws: Aws) -> QueueDriver:
    return QueueDriver(app_aws, "default")


@pytest.fixture
def critical(app_aws: Aws) -> QueueDriver:
    return QueueDriver(app_aws, "critical")


@pytest.fixture
def bulk(app_aws: Aws) -> QueueDriver:
    return QueueDriver(app_aws, "bulk")


@pytest.fixture
def effects(app_aws: Aws) -> EffectsLedger:
    return EffectsLedger(client=app_aws.dynamodb)


# --- helpers ----------------------------------------------------------------------------------


def welcome_email_body(user_id: str, *, job_id: str | None = None) -> str:
    return envelope("send_welcome_email", {"user_id": user_id, "locale": "en"}, v=2, job_id=job_id)


def welcome_email_effect(user_id: str) -> str:
    return f"email:welcome-en:{user_id}@users.example"


def charge_body(order_id: str, *, job_id: str | None = None) -> str:
    return envelope("charge_order", {"order_id": order_id, "amount_cents": 1999, "currency": "EUR"}, job_id=job_id)


def the_dead_letter(queue: QueueDriver) -> DeadLetter:
    letters = queue.dead_letters()
    assert len(letters) == 1, f"expected one dead letter on {queue.name}, got {len(letters)}"
    return letters[0]


def assert_dead_lettered(
    queue: QueueDriver,
    body: str,
    *,
    reason: Reason,
    error_class: str,
    job_type: str | None,
    job_id: str | None,
    attempts: int = 1,
    first_failed_at: datetime | None = None,
) -> DeadLetter:
    """The queue's one dead letter is ``body``, byte for byte, with the failure context in its attributes."""
    letter = the_dead_letter(queue)
    assert letter.body == body
    expected = {
        attrs.REASON: reason.value,
        attrs.ERROR_CLASS: error_class,
        attrs.ATTEMPTS: str(attempts),
        attrs.SOURCE_QUEUE: queue.name,
    }
    if job_type is not None:
        expected[attrs.JOB_TYPE] = job_type
    if job_id is not None:
        expected[attrs.JOB_ID] = job_id
    described = dict(letter.attributes)
    error = described.pop(attrs.ERROR, "")
    failed_at = {name: described.pop(name, "") for name in (attrs.FIRST_FAILED_AT, attrs.LAST_FAILED_AT)}
    assert described == expected
    assert error.strip("-"), "the dead letter should say what went wrong"
    assert all(text.endswith("Z") for text in failed_at.values()), failed_at
    assert parse_timestamp(failed_at[attrs.FIRST_FAILED_AT]) == (first_failed_at or queue.now)
    assert parse_timestamp(failed_at[attrs.LAST_FAILED_AT]) == queue.now
    return letter


# --- 1. idempotency -----------------------------------------------------------------------------


def test_duplicate_delivery_sends_the_welcome_email_once(default_queue: QueueDriver, effects: EffectsLedger) -> None:
    default_queue.send(welcome_email_body("u-1"))
    first = default_queue.receive_one(visibility=0)
    duplicate = default_queue.receive_one()
    assert duplicate["messageId"] == first["messageId"]
    assert receive_count(duplicate) == 2

    assert default_queue.run(first) == []
    assert default_queue.run(duplicate) == []

    assert effects.get(welcome_email_effect("u-1")) == Effect(calls=1, applied=1)


def test_redriven_job_does_not_send_a_second_welcome_email(default_queue: QueueDriver, effects: EffectsLedger) -> None:
    body = welcome_email_body("u-2")
    original = default_queue.send_and_receive(body)
    assert default_queue.run(original) == []

    redriven = default_queue.send_and_receive(body)  # as `conveyor dlq redrive` re-sends it: a new message
    assert redriven["messageId"] != original["messageId"]
    assert default_queue.run(redriven) == []

    assert effects.get(welcome_email_effect("u-2")) == Effect(calls=1, applied=1)


def test_two_jobs_charging_the_same_order_charge_it_once(critical: QueueDriver, effects: EffectsLedger) -> None:
    critical.send(charge_body("o-1", job_id="job-a"))
    critical.send(charge_body("o-1", job_id="job-b"))
    critical.send(charge_body("o-2", job_id="job-c"))

    assert critical.run(*critical.receive()) == []

    assert effects.get("payments:charge:o-1") == Effect(calls=1, applied=1)
    assert effects.get("payments:charge:o-2") == Effect(calls=1, applied=1)


def test_transient_failure_is_retried_and_the_email_then_sent_once(
    default_queue: QueueDriver, effects: EffectsLedger
) -> None:
    first = default_queue.send_and_receive(welcome_email_body("flaky-1"))
    assert default_queue.run(first) == [first["messageId"]]
    assert effects.get(welcome_email_effect("flaky-1")) == Effect(calls=1, applied=0)

    assert default_queue.run(default_queue.redeliver(first)) == []

    assert effects.get(welcome_email_effect("flaky-1")) == Effect(calls=2, applied=1)


# --- 2. backoff ---------------------------------------------------------------------------------

BACKOFF = RetryPolicy(max_attempts=25, base=timedelta(seconds=2), cap=timedelta(minutes=15))


class TopOfRange(random.Random):
    """Always draws the upper bound, exposing the ceiling full jitter draws under."""

    def uniform(self, a: float, b: float) -> float:
        return b


def ceiling(policy: RetryPolicy, attempt: int) -> timedelta:
    """min(cap, base * 2**(attempt-1)), in floats so that a huge attempt cannot overflow."""
    return timedelta(seconds=min(policy.cap.total_seconds(), policy.base.total_seconds() * 2.0 ** (attempt - 1)))


@pytest.mark.parametrize("attempt", [1, 2, 3, 5, 8, 9, 10, 25, 1000])
def test_retry_delay_stays_between_zero_and_the_capped_exponential_ceiling(attempt: int) -> None:
    rng = random.Random(attempt)
    delays = [BACKOFF.delay(attempt, rng) for _ in range(500)]
    assert all(timedelta(0) <= delay <= ceiling(BACKOFF, attempt) for delay in delays)


@pytest.mark.parametrize(
    ("attempt", "expected"),
    [
        (1, timedelta(seconds=2)),
        (2, timedelta(seconds=4)),
        (3, timedelta(seconds=8)),
        (9, timedelta(seconds=512)),
        (10, timedelta(minutes=15)),
        (1000, timedelta(minutes=15)),
    ],
)
def test_retry_delay_ceiling_doubles_per_attempt_up_to_the_cap(attempt: int, expected: timedelta) -> None:
    assert BACKOFF.delay(attempt, TopOfRange()) == expected


def test_retry_delays_are_jittered_across_the_whole_range() -> None:
    rng = random.Random(42)
    top = ceiling(BACKOFF, 4).total_seconds()
    samples = [BACKOFF.delay(4, rng).total_seconds() for _ in range(2000)]

    assert len(set(samples)) > 1990
    assert min(samples) < 0.02 * top
    assert max(samples) > 0.98 * top
    deciles = {min(int(10 * sample / top), 9) for sample in samples}
    assert deciles == set(range(10))
    assert abs(sum(samples) / len(samples) - top / 2) < 0.05 * top


def test_failed_record_is_reported_and_hidden_for_its_backoff(standard: QueueDriver, aws: Aws) -> None:
    # Received with visibility 0: without the harness's backoff it would be visible again at once.
    record = standard.send_and_receive(step_body("k", fail_attempts=1), visibility=0)

    with requests_to(aws.sqs, "ChangeMessageVisibility") as changes:
        assert standard.run(record) == [record["messageId"]]

    assert standard.receive(visibility=0) == []
    expected = STEP_RETRY.delay(1, random.Random(DEFAULT_SEED))  # the harness's first draw from its rng
    assert [change["VisibilityTimeout"] for change in changes] == [math.ceil(expected.total_seconds())]
    assert [change["ReceiptHandle"] for change in changes] == [record["receiptHandle"]]


# --- 3. every dead-letter reason ----------------------------------------------------------------


@dataclass(frozen=True)
class Unprocessable:
    """A message the harness must ack and dead-letter at once, and what its dead letter must say."""

    body: str
    reason: Reason
    error_class: str = "ContractError"
    job_type: str | None = None
    job_id: str | None = None
    runs_handler: bool = False


def unprocessable(case_id: str, body: str, reason: Reason, **expected: Any) -> Any:
    return pytest.param(Unprocessable(body, reason, **expected), id=case_id)


def job_case(case_id: str, job_type: str, data: dict[str, Any], reason: Reason, *, v: int = 1, **expected: Any) -> Any:
    """A case whose envelope parses, so its dead letter names the job type and id."""
    job_id = f"job-{case_id}"
    body = envelope(job_type, data, v=v, job_id=job_id, created_at=expected.pop("created_at", None))
    return unprocessable(case_id, body, reason, job_type=job_type, job_id=job_id, **expected)


UNPROCESSABLE = [
    unprocessable("invalid_json", " {not json, ünïcode\n", Reason.INVALID_JSON),
    # Deeper than Python's JSON parser recurses: it raises RecursionError, not a ValueError.
    unprocessable("invalid_json-nested-5000-deep", '{"data": ' + "[" * 5000 + "]" * 5000 + "}", Reason.INVALID_JSON),
    unprocessable("invalid_envelope-array", '["step", {"key": "k"}]', Reason.INVALID_ENVELOPE),
    unprocessable(
        "invalid_envelope-no-created_at",
        '{"type": "step", "v": 1, "id": "job-1", "data": {"key": "k"}}',
        Reason.INVALID_ENVELOPE,
    ),
    unprocessable(
        "invalid_envelope-string-version",
        envelope("step", {"key": "k"}).replace('"v": 1,', '"v": "1",'),
        Reason.INVALID_ENVELOPE,
    ),
    job_case("unknown_type", "no_such_job", {"key": "k"}, Reason.UNKNOWN_TYPE),
    job_case("unknown_type-other-queue", "ordered_step", {"key": "k"}, Reason.UNKNOWN_TYPE),
    job_case(
        "unsupported_version-too-new", "ledger_entry", {"key": "k", "currency": "EUR"}, Reason.UNSUPPORTED_VERSION, v=4
    ),
    job_case("unsupported_version-too-old", "ledger_entry", {"key": "k"}, Reason.UNSUPPORTED_VERSION, v=1),
    job_case("invalid_payload-string-for-int", "step", {"key": "k", "count": "5"}, Reason.INVALID_PAYLOAD),
    job_case("invalid_payload-extra-field", "step", {"key": "k", "colour": "red"}, Reason.INVALID_PAYLOAD),
    job_case("invalid_payload-missing-field", "step", {}, Reason.INVALID_PAYLOAD),
    job_case("payload_too_large", "tiny", {"key": "x" * TINY_MAX_PAYLOAD_BYTES}, Reason.PAYLOAD_TOO_LARGE),
    job_case(
        "permanent_error-raised",
        "step",
        {"key": "k", "outcome": "permanent"},
        Reason.PERMANENT_ERROR,
        error_class="PermanentError",
        runs_handler=True,
    ),
    job_case(
        "permanent_error-declared",
        "step",
        {"key": "k", "outcome": "declared_permanent"},
        Reason.PERMANENT_ERROR,
        error_class="LedgerRejectedError",
        runs_handler=True,
    ),
    job_case(
        "deadline_exceeded",
        "step",
        {"key": "k"},
        Reason.DEADLINE_EXCEEDED,
        created_at=FIXED_NOW - STEP_RETRY.max_wall_time - timedelta(seconds=1),
    ),
]


@pytest.mark.parametrize("case", UNPROCESSABLE)
def test_unprocessable_message_is_acked_and_dead_lettered_with_its_reason(
    standard: QueueDriver, runs: list[tuple[str, int]], case: Unprocessable
) -> None:
    record = standard.send_and_receive(case.body)

    assert standard.run(record) == []

    assert_dead_lettered(
        standard,
        case.body,
        reason=case.reason,
        error_class=case.error_class,
        job_type=case.job_type,
        job_id=case.job_id,
    )
    assert runs == ([("k", 1)] if case.runs_handler else [])
    assert standard.receive() == [], "nothing is re-sent for a dead-lettered message"


def test_job_at_the_largest_payload_is_dead_lettered_with_its_reason(
    standard: QueueDriver, runs: list[tuple[str, int]]
) -> None:
    """The body and the dead letter's attributes (an error of 4-byte characters) still fit in SQS's 1 MiB."""
    data = {"key": "", "outcome": "permanent"}
    room = limits.MAX_PAYLOAD_BYTES - len(envelope("biggest", data, job_id="job-big").encode())
    body = envelope("biggest", {**data, "key": "😀" * (room // 4) + "x" * (room % 4)}, job_id="job-big")
    assert len(body.encode()) == limits.MAX_PAYLOAD_BYTES

    assert standard.run(standard.send_and_receive(body)) == []

    (letter,) = standard.dead_letters()
    assert letter.body == body
    assert letter.attributes[attrs.REASON] == Reason.PERMANENT_ERROR


def test_message_at_an_older_version_with_an_upcaster_runs(standard: QueueDriver, runs: list[tuple[str, int]]) -> None:
    record = standard.send_and_receive(envelope("ledger_entry", {"key": "k"}, v=2))
    assert standard.run(record) == []
    assert runs == [("k", 1)]
    assert standard.dead_letters() == []


def test_small_enough_message_passes_the_payload_size_limit(standard: QueueDriver, runs: list[tuple[str, int]]) -> None:
    record = standard.send_and_receive(envelope("tiny", {"key": "k"}))
    assert standard.run(record) == []
    assert runs == [("k", 1)]
    assert standard.dead_letters() == []


def test_webhook_answered_404_is_dead_lettered_as_permanent(bulk: QueueDriver, effects: EffectsLedger) -> None:
    url = "https://hooks.example/status/404"
    body = envelope("deliver_webhook", {"url": url, "event_id": "evt-1", "body": "{}"}, job_id="job-hook")
    record = bulk.send_and_receive(body)

    assert bulk.run(record) == []

    assert_dead_lettered(
        bulk,
        body,
        reason=Reason.PERMANENT_ERROR,
        error_class="PermanentError",
        job_type="deliver_webhook",
        job_id="job-hook",
    )
    assert effects.get(f"webhooks:{url}:evt-1") == Effect(calls=1, applied=0)


def test_job_failing_every_attempt_is_dead_lettered_when_its_attempts_run_out(
    standard: QueueDriver, runs: list[tuple[str, int]]
) -> None:
    body = envelope("step", {"key": "k", "fail_attempts": 99}, job_id="job-doomed")
    first = standard.send_and_receive(body)
    assert standard.run(first) == [first["messageId"]]
    second = standard.redeliver(first)
    assert standard.run(second) == [first["messageId"]]
    third = standard.redeliver(second)

    assert standard.run(third) == []

    assert_dead_lettered(
        standard,
        body,
        reason=Reason.ATTEMPTS_EXHAUSTED,
        error_class="FlakyError",
        job_type="step",
        job_id="job-doomed",
        attempts=STEP_RETRY.max_attempts,
        first_failed_at=first_receive_time(first),
    )
    assert runs == [("k", 1), ("k", 2), ("k", 3)]


def test_attempt_count_comes_from_the_receive_count_lambda_reports(
    standard: QueueDriver, runs: list[tuple[str, int]]
) -> None:
    body = envelope("step", {"key": "k", "fail_attempts": 99}, job_id="job-counted")
    record = standard.send_and_receive(body)
    record["attributes"]["ApproximateReceiveCount"] = str(STEP_RETRY.max_attempts)

    assert standard.run(record) == []

    letter = the_dead_letter(standard)
    assert letter.attributes[attrs.REASON] == Reason.ATTEMPTS_EXHAUSTED
    assert letter.attributes[attrs.ATTEMPTS] == str(STEP_RETRY.max_attempts)
    assert runs == [("k", STEP_RETRY.max_attempts)]


def test_attempts_spent_before_a_snooze_count_toward_exhaustion(
    standard: QueueDriver, runs: list[tuple[str, int]]
) -> None:
    body = envelope("step", {"key": "k", "fail_attempts": 99}, job_id="job-woken")
    prior = STEP_RETRY.max_attempts - 1
    standard.send(body, attributes={attrs.PRIOR_ATTEMPTS: attrs.number(prior)})  # as a snooze's copy carries
    record = standard.receive_one()

    assert standard.run(record) == []

    assert_dead_lettered(
        standard,
        body,
        reason=Reason.ATTEMPTS_EXHAUSTED,
        error_class="FlakyError",
        job_type="step",
        job_id="job-woken",
        attempts=STEP_RETRY.max_attempts,
    )
    assert runs == [("k", STEP_RETRY.max_attempts)]


def test_retry_that_would_land_past_max_wall_time_is_dead_lettered_as_deadline_exceeded(
    standard: QueueDriver, runs: list[tuple[str, int]]
) -> None:
    # Exactly max_wall_time old: it may still run, but any backoff after a failure ends past the deadline.
    created_at = FIXED_NOW - STEP_RETRY.max_wall_time
    body = envelope("step", {"key": "k", "fail_attempts": 1}, job_id="job-late", created_at=created_at)
    record = standard.send_and_receive(body)

    assert standard.run(record) == []

    assert_dead_lettered(
        standard,
        body,
        reason=Reason.DEADLINE_EXCEEDED,
        error_class="FlakyError",
        job_type="step",
        job_id="job-late",
    )
    assert runs == [("k", 1)]


# --- 4. a dead letter that cannot be sent ------------------------------------------------------


def _sqs_fails(sqs: Stubber, operation: str) -> None:
    sqs.add_client_error(
        operation,
        service_error_code="InternalError",
        service_message="We encountered an internal error. Please try again.",
        http_status_code=500,
    )


@pytest.mark.parametrize(
    "body",
    [
        pytest.param("{not json", id="invalid_json"),
        pytest.param(step_body("k", outcome="permanent"), id="permanent_error"),
    ],
)
def test_dead_letter_that_cannot_be_sent_is_reported_failed_not_dropped(
    standard: QueueDriver, aws: Aws, body: str
) -> None:
    record = standard.send_and_receive(body)

    with Stubber(aws.sqs) as sqs:
        _sqs_fails(sqs, "send_message")
        assert standard.run(record) == [record["messageId"]]
        sqs.assert_no_pending_responses()

    assert standard.dead_letters() == []
    again = standard.redeliver(record)
    assert standard.run(again) == []
    letter = the_dead_letter(standard)
    assert letter.body == body
    assert letter.attributes[attrs.ATTEMPTS] == "2"


def test_snoozed_job_whose_copy_cannot_be_sent_stays_on_the_queue(
    standard: QueueDriver, aws: Aws, caplog: pytest.LogCaptureFixture
) -> None:
    record = standard.send_and_receive(step_body("k", snooze_s=30))

    with Stubber(aws.sqs) as sqs:
        _sqs_fails(sqs, "send_message")
        assert standard.run(record) == [record["messageId"]]
        sqs.assert_no_pending_responses()

    assert standard.delayed_count() == 0
    assert standard.dead_letters() == []
    (failure,) = [entry for entry in caplog.records if entry.getMessage().startswith("record failed before")]
    assert failure.exc_info is not None, "logged with its error"
    assert "InternalError" in str(failure.exc_info[1])


def test_retry_whose_backoff_cannot_be_set_is_still_reported_failed(standard: QueueDriver, aws: Aws) -> None:
    record = standard.send_and_receive(step_body("k", fail_attempts=1))

    with Stubber(aws.sqs) as sqs:
        _sqs_fails(sqs, "change_message_visibility")
        assert standard.run(record) == [record["messageId"]]
        sqs.assert_no_pending_responses()

    assert standard.dead_letters() == []


# --- 5. sensitive values ------------------------------------------------------------------------


def test_sensitive_payload_value_is_masked_in_the_dead_letter_error(standard: QueueDriver) -> None:
    secret = "card=4242-4242-4242-4242"
    data = {"url": "https://hooks.example/in", "event_id": "evt-9", "body": secret}
    body = envelope("leaky_webhook", data, job_id="job-leak")
    record = standard.send_and_receive(body)

    assert standard.run(record) == []

    letter = assert_dead_lettered(
        standard,
        body,
        reason=Reason.PERMANENT_ERROR,
        error_class="PermanentError",
        job_type="leaky_webhook",
        job_id="job-leak",
    )
    assert letter.attributes[attrs.ERROR] == f"receiver rejected body {MASK}"
    assert not [name for name, value in letter.attributes.items() if secret in value]
    assert secret in letter.body, "the body is kept whole, so the job can be redriven"


# --- 6. FIFO ordering ---------------------------------------------------------------------------


def ordered_body(key: str, **data: Any) -> str:
    return envelope("ordered_step", {"key": key, **data})


def test_fifo_failure_holds_back_the_rest_of_its_group_only(ordered: QueueDriver, runs: list[tuple[str, int]]) -> None:
    a1 = ordered.send(ordered_body("a1", fail_attempts=1), group="A")
    b1 = ordered.send(ordered_body("b1"), group="B")
    a2 = ordered.send(ordered_body("a2"), group="A")
    b2 = ordered.send(ordered_body("b2"), group="B")
    records = ordered.receive()
    assert [record["messageId"] for record in records] == [a1, b1, a2, b2]

    assert ordered.run(*records) == [a1, a2]

    assert runs == [("a1", 1), ("b1", 1), ("b2", 1)]
    assert ordered.dead_letters() == []


def test_fifo_dead_letter_keeps_its_message_group(ordered: QueueDriver) -> None:
    body = envelope("ordered_step", {"key": "a1", "outcome": "permanent"}, job_id="job-fifo")
    ordered.send(body, group="A")

    assert ordered.run(ordered.receive_one()) == []

    letter = assert_dead_lettered(
        ordered,
        body,
        reason=Reason.PERMANENT_ERROR,
        error_class="PermanentError",
        job_type="ordered_step",
        job_id="job-fifo",
    )
    assert letter.group_id == "A"


def test_fifo_batch_whose_every_record_fails_is_reported_as_batch_item_failures(ordered: QueueDriver) -> None:
    failing = ordered.send(ordered_body("a1", fail_attempts=1), group="A")

    assert ordered.run(ordered.receive_one()) == [failing]


def test_fifo_snooze_holds_its_group_by_extending_visibility(ordered: QueueDriver, runs: list[tuple[str, int]]) -> None:
    # FIFO has no per-message delay: the snoozed message keeps its place (and its group waits) instead of
    # being re-sent behind the rest of the group.
    a1 = ordered.send(ordered_body("a1", snooze_s=30), group="A")
    a2 = ordered.send(ordered_body("a2"), group="A")
    ordered.send(ordered_body("b1"), group="B")
    records = ordered.receive()

    with (
        requests_to(ordered.aws.sqs, "ChangeMessageVisibility") as hidden,
        requests_to(ordered.aws.sqs, "SendMessage") as resent,
    ):
        assert ordered.run(*records) == [a1, a2]

    assert runs == [("a1", 1), ("b1", 1)]
    assert [(change["ReceiptHandle"], change["VisibilityTimeout"]) for change in hidden] == [
        (records[0]["receiptHandle"], 30)
    ]
    assert resent == []


# --- 7. a batch of mixed outcomes ---------------------------------------------------------------


def test_mixed_batch_reports_exactly_the_records_to_retry(critical: QueueDriver, effects: EffectsLedger) -> None:
    critical.send(charge_body("o-1", job_id="job-ok"))
    critical.send(charge_body("o-1", job_id="job-duplicate"))
    retry = critical.send(charge_body("o-flaky-1", job_id="job-retry"))
    declined = charge_body("declined-1", job_id="job-declined")
    critical.send(declined)
    records = critical.receive()
    assert len(records) == 4

    assert critical.run(*records) == [retry]

    assert effects.get("payments:charge:o-1") == Effect(calls=1, applied=1)
    assert effects.get("payments:charge:o-flaky-1") == Effect(calls=1, applied=0)
    assert_dead_lettered(
        critical,
        declined,
        reason=Reason.PERMANENT_ERROR,
        error_class="CardDeclinedError",
        job_type="charge_order",
        job_id="job-declined",
    )


# --- 8. timeouts --------------------------------------------------------------------------------


def test_job_running_past_its_timeout_is_retried_and_runs_again(
    standard: QueueDriver, runs: list[tuple[str, int]]
) -> None:
    record = standard.send_and_receive(envelope("slow_step", {"key": "slow"}), visibility=0)

    assert standard.run(record) == [record["messageId"]]
    assert standard.receive(visibility=0) == [], "a timed-out job waits out its backoff like any retry"

    assert standard.run(standard.redeliver(record)) == []
    assert runs == [("slow", 1), ("slow", 2)]
    assert standard.dead_letters() == []


# --- 9. snooze ----------------------------------------------------------------------------------


def resent_copy(queue: QueueDriver, record: Record) -> dict[str, Any]:
    """Run ``record``, which must be acked, and return the one SendMessage request that re-sent it."""
    with requests_to(queue.aws.sqs, "SendMessage") as sent:
        assert queue.run(record) == []
    assert len(sent) == 1, f"expected one re-sent copy, got {len(sent)}"
    assert sent[0]["MessageBody"] == record["body"]
    return sent[0]


def copy_attributes(request: dict[str, Any]) -> dict[str, str]:
    return {name: value["StringValue"] for name, value in request.get("MessageAttributes", {}).items()}


def test_snoozed_job_is_acked_and_resent_delayed_without_spending_an_attempt(
    standard: QueueDriver, runs: list[tuple[str, int]]
) -> None:
    first = standard.send_and_receive(step_body("nap", fail_attempts=1, snooze_s=30))
    assert standard.run(first) == [first["messageId"]]  # attempt 1 fails; attempt 2 snoozes

    copy = resent_copy(standard, standard.redeliver(first))

    assert copy["DelaySeconds"] == 30
    carried = copy_attributes(copy)
    assert carried[attrs.PRIOR_ATTEMPTS] == "1"
    assert parse_timestamp(carried[attrs.FIRST_FAILED_AT]) == first_receive_time(first)
    assert attrs.NOT_BEFORE not in carried
    assert standard.delayed_count() == 1
    assert standard.receive() == [], "the copy is delayed, not visible"

    standard.resend_now(copy)
    resent_copy(standard, standard.receive_one())  # snoozes again, still on its second attempt
    assert runs == [("nap", 1), ("nap", 2), ("nap", 2)]


def test_a_key_in_progress_elsewhere_is_snoozed_a_function_timeout_without_spending_an_attempt(
    standard: QueueDriver, aws: Aws, topology: Topology, runs: list[tuple[str, int]]
) -> None:
    """A worker that crashed mid-job leaves its key in progress until its invocation's deadline; redeliveries
    in that window must not spend attempts (found by the chaos run: such a job was dead-lettered)."""
    body = envelope("step", {"key": "held"}, job_id="job-held")
    key = step.idempotency_key_for(job_id="job-held", dedupe_key=None, payload=Step(key="held"))
    crashed = DynamoDBPersistenceLayer(
        table_name=aws.settings("standard").idempotency_table,
        key_attr=RECORD_KEY,
        expiry_attr=RECORD_TTL,
        boto3_client=aws.dynamodb,
    )
    crashed.configure(IdempotencyConfig(event_key_jmespath="key"), key_prefix=f"{KEY_PREFIX}.{step.name}")
    crashed.save_inprogress(data={"key": key}, remaining_time_in_millis=60_000)
    last = STEP_RETRY.max_attempts - 1
    standard.send(body, attributes={attrs.PRIOR_ATTEMPTS: attrs.number(last)})  # its last attempt

    copy = resent_copy(standard, standard.receive_one())

    assert copy["DelaySeconds"] == topology.queue("standard").function_timeout.total_seconds()
    assert copy_attributes(copy)[attrs.PRIOR_ATTEMPTS] == str(last), "no attempt spent"
    assert standard.dead_letters() == []
    assert runs == [], "the handler did not run"


def test_snooze_past_fifteen_minutes_waits_out_not_before_across_resends(
    standard: QueueDriver, runs: list[tuple[str, int]]
) -> None:
    wake_at = FIXED_NOW + timedelta(hours=1)
    copy = resent_copy(standard, standard.send_and_receive(step_body("hibernate", snooze_s=3600)))
    assert copy["DelaySeconds"] == 900
    assert parse_timestamp(copy_attributes(copy)[attrs.NOT_BEFORE]) == wake_at
    assert copy_attributes(copy)[attrs.PRIOR_ATTEMPTS] == "0"

    # 15 minutes on, the copy arrives 45 minutes early: re-sent for the longest delay SQS allows, not run.
    standard.now = FIXED_NOW + timedelta(minutes=15)
    standard.resend_now(copy)
    copy = resent_copy(standard, standard.receive_one())
    assert copy["DelaySeconds"] == 900
    assert parse_timestamp(copy_attributes(copy)[attrs.NOT_BEFORE]) == wake_at

    # 10 minutes early: the last stretch fits one SQS delay, so not_before is dropped.
    standard.now = FIXED_NOW + timedelta(minutes=50)
    standard.resend_now(copy)
    copy = resent_copy(standard, standard.receive_one())
    assert copy["DelaySeconds"] == 600
    assert attrs.NOT_BEFORE not in copy_attributes(copy)
    assert runs == [("hibernate", 1)]

    standard.now = wake_at
    standard.resend_now(copy)
    resent_copy(standard, standard.receive_one())  # runs, and (this job being sleepy) snoozes again
    assert runs == [("hibernate", 1), ("hibernate", 1)]


def full_dead_letter(queue: QueueDriver) -> DeadLetter:
    """A job the CLI redrove once, that failed again: its DLQ entry has every attribute (ten)."""
    queue.send(
        step_body("doomed", outcome="permanent"),
        attributes={attrs.REDRIVEN_AT: attrs.timestamp(queue.now), attrs.REDRIVE_ID: attrs.string("r-1")},
    )
    assert queue.run(queue.receive_one()) == []
    (letter,) = queue.dead_letters()
    assert len(letter.attributes) == limits.SQS_MAX_MESSAGE_ATTRIBUTES
    return letter


def send_moved_back(queue: QueueDriver, letter: DeadLetter, body: str) -> None:
    """``body`` on its queue with the dead letter's attributes, as the SQS console's redrive (a move task) leaves it."""
    queue.send(body, attributes={name: attrs.string(value) for name, value in letter.attributes.items()})


def moved_back(queue: QueueDriver, letter: DeadLetter, body: str) -> Record:
    send_moved_back(queue, letter, body)
    return queue.receive_one()


@pytest.mark.parametrize(
    "age",
    [
        pytest.param(DEFAULT_AGE, id="recent"),
        # Older than its max_wall_time: only the move back grants it a fresh window.
        pytest.param(STEP_RETRY.max_wall_time + timedelta(days=1), id="past-its-wall-time"),
    ],
)
def test_job_moved_back_from_its_dlq_with_its_attributes_then_snoozed_an_hour_is_resent_and_succeeds(
    standard: QueueDriver, runs: list[tuple[str, int]], age: timedelta
) -> None:
    """A move back keeps the entry's ten attributes; SQS refuses an eleventh, so the copy must carry its own set."""
    standard.now = datetime.now(UTC)  # a move's first receive is checked against SQS's own clock
    letter = full_dead_letter(standard)

    body = envelope("step", {"key": "napper", "snooze_s": 3600, "snoozes": 1}, created_at=standard.now - age)
    copy = resent_copy(standard, moved_back(standard, letter, body))

    assert copy["DelaySeconds"] == limits.SQS_MAX_DELAY.total_seconds()
    carried = copy_attributes(copy)
    assert set(carried) == {attrs.PRIOR_ATTEMPTS, attrs.FIRST_FAILED_AT, attrs.NOT_BEFORE, attrs.REDRIVEN_AT}
    assert standard.delayed_count() == 1, "SQS (strict) accepted the copy"

    standard.now += timedelta(hours=1)
    standard.resend_now(copy)
    assert standard.run(standard.receive_one()) == []
    assert runs == [("doomed", 1), ("napper", 1), ("napper", 1)]
    assert standard.dead_letters() == []


# --- 10. upcasting ------------------------------------------------------------------------------


def test_v1_welcome_email_is_upcast_and_sent_as_v2(default_queue: QueueDriver, effects: EffectsLedger) -> None:
    record = default_queue.send_and_receive(envelope("send_welcome_email", {"user": "u-legacy"}, v=1))

    assert default_queue.run(record) == []

    assert effects.get(welcome_email_effect("u-legacy")) == Effect(calls=1, applied=1)
    assert default_queue.dead_letters() == []


def test_v1_welcome_email_its_upcaster_cannot_read_is_dead_lettered_as_invalid_payload(
    default_queue: QueueDriver,
) -> None:
    body = envelope("send_welcome_email", {"usr": "u-typo"}, v=1, job_id="job-typo")
    record = default_queue.send_and_receive(body)

    assert default_queue.run(record) == []

    assert_dead_lettered(
        default_queue,
        body,
        reason=Reason.INVALID_PAYLOAD,
        error_class="ContractError",
        job_type="send_welcome_email",
        job_id="job-typo",
    )


# --- 11. deferral -------------------------------------------------------------------------------


def test_records_whose_timeout_no_longer_fits_are_resent_not_failed_or_run(
    standard: QueueDriver, runs: list[tuple[str, int]]
) -> None:
    for key in ("k0", "k1", "k2"):
        standard.send(step_body(key))
    records = standard.receive()
    assert len(records) == 3

    # 4s left, 1s of it kept in reserve: under the 5s step timeout. The first record runs
    # with what there is; the others are re-sent for a later invocation.
    with requests_to(standard.aws.sqs, "SendMessage") as sent:
        assert standard.run(*records, timeout_s=4) == []

    first_key = json.loads(records[0]["body"])["data"]["key"]
    assert runs == [(first_key, 1)]
    assert [request["DelaySeconds"] for request in sent] == [0, 0]
    resent = standard.receive()
    assert sorted(record["body"] for record in resent) == sorted(record["body"] for record in records[1:])
    assert [string_attributes(record)[attrs.PRIOR_ATTEMPTS] for record in resent] == ["0", "0"]


def test_moved_back_records_deferred_for_time_are_resent_with_their_own_attributes(
    standard: QueueDriver, runs: list[tuple[str, int]]
) -> None:
    """Deferral re-sends as a snooze does: the moved-back copies' ten attributes are not carried."""
    standard.now = datetime.now(UTC)
    letter = full_dead_letter(standard)
    for key in ("k0", "k1"):
        send_moved_back(standard, letter, step_body(key))
    records = standard.receive()
    assert len(records) == 2

    with requests_to(standard.aws.sqs, "SendMessage") as sent:
        assert standard.run(*records, timeout_s=4) == []  # the second no longer fits: deferred

    own = {attrs.PRIOR_ATTEMPTS, attrs.FIRST_FAILED_AT, attrs.REDRIVEN_AT}
    assert [set(copy_attributes(request)) for request in sent] == [own]
    (resent,) = standard.receive()
    assert set(string_attributes(resent)) == own, "SQS (strict) accepted the copy"


def test_batch_with_time_to_spare_runs_every_record(standard: QueueDriver, runs: list[tuple[str, int]]) -> None:
    for key in ("k0", "k1", "k2"):
        standard.send(step_body(key))

    assert standard.run(*standard.receive()) == []

    assert sorted(runs) == [("k0", 1), ("k1", 1), ("k2", 1)]
    assert standard.receive() == []


def test_batch_of_jobs_without_a_declared_timeout_runs_in_one_full_invocation(
    default_queue: QueueDriver, effects: EffectsLedger
) -> None:
    default_queue.send(welcome_email_body("u-a"))
    default_queue.send(welcome_email_body("u-b"))
    records = default_queue.receive()
    assert len(records) == 2

    # A fresh invocation has the queue's function timeout left, minus the reserve: under the
    # function timeout itself, yet a job without a declared timeout still gets its turn.
    with requests_to(default_queue.aws.sqs, "SendMessage") as resent:
        assert default_queue.run(*records) == []

    assert resent == []

    assert effects.get(welcome_email_effect("u-a")) == Effect(calls=1, applied=1)
    assert effects.get(welcome_email_effect("u-b")) == Effect(calls=1, applied=1)


def test_redriven_job_gets_a_fresh_max_wall_time(standard: QueueDriver, runs: list[tuple[str, int]]) -> None:
    """`conveyor dlq redrive` marks the copy; an entry dead-lettered for its age must not die of it again."""
    standard.now = datetime.now(UTC)  # the redrive time is checked against SQS's own send time
    created_at = standard.now - STEP_RETRY.max_wall_time - timedelta(days=3)
    body = envelope("step", {"key": "k"}, job_id="job-redriven", created_at=created_at)
    standard.send(body, attributes={attrs.REDRIVEN_AT: attrs.timestamp(standard.now - timedelta(minutes=1))})

    assert standard.run(standard.receive_one()) == []

    assert runs == [("k", 1)]
    assert standard.dead_letters() == []


@pytest.mark.parametrize(
    "redriven_at",
    [
        pytest.param(lambda created, now: created - timedelta(days=1), id="before-the-enqueue"),
        pytest.param(lambda created, now: now + timedelta(days=365), id="in-the-future"),
        pytest.param(lambda created, now: None, id="not-a-time"),
    ],
)
def test_a_redrive_mark_cannot_extend_the_deadline_beyond_the_send(
    standard: QueueDriver, runs: list[tuple[str, int]], redriven_at: Any
) -> None:
    """Only a redrive that happened (at most when SQS received the copy) grants a fresh window."""
    # The worker runs more than max_wall_time after SQS received the copy (and after the enqueue).
    standard.now = datetime.now(UTC) + STEP_RETRY.max_wall_time + timedelta(minutes=1)
    created_at = standard.now - STEP_RETRY.max_wall_time - timedelta(seconds=1)
    mark = redriven_at(created_at, standard.now)
    body = envelope("step", {"key": "k"}, job_id="job-odd", created_at=created_at)
    standard.send(body, attributes={attrs.REDRIVEN_AT: attrs.timestamp(mark) if mark else attrs.string("soon")})

    assert standard.run(standard.receive_one()) == []

    assert runs == []
    assert [letter.attributes[attrs.REASON] for letter in standard.dead_letters()] == [Reason.DEADLINE_EXCEEDED]
