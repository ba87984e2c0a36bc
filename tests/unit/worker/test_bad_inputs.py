"""The bad-input corpus (chaos/bad_inputs.json) replayed through the real worker on moto, strict mode on.

Each entry is sent with boto3 to its queue, in one batch with good messages of that queue; the batch
is received as Lambda receives it and run by ``Worker(Harness(...)).handle``; the records it does
not report failed are deleted, as the event source mapping deletes them. Then every bad input must
be in the queue's DLQ, on its first delivery, with exactly its reason and its body byte for byte,
and a "job dead-lettered" log line with that reason; every good message (the corpus's good inputs
and the batch's companions) must have run and been deleted; and nothing may be left on the queue.
Every attribute the harness wrote must be one SQS takes (strict mode does not check attribute
values' characters, nor a Number's precision, so this file does).

After the corpus, one named test per defect the corpus found, each failing without its fix.
"""

import io
import itertools
import json
import re
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import timedelta
from decimal import Decimal, InvalidOperation
from typing import Any

import hypothesis
import pytest
from botocore.exceptions import ClientError

from chaos.corpus import DEFAULT_OUTPUT, HYPOTHESIS_VERSION, BadInput, Corpus, generate, load, render
from conveyor.contract import limits
from conveyor.contract import message_attributes as attrs
from conveyor.contract.reasons import Reason
from conveyor.contract.sizes import message_bytes
from conveyor.worker.outcomes import Kind
from functions.providers.effects import Effect, EffectsLedger
from functions.topology import TOPOLOGY
from tests.aws import Aws, moto_aws
from tests.harness_support import QueueDriver, Record, envelope, requests_to

CORPUS: Corpus = load()
REFUSED_CLASS = "refused_by_sqs"
REPLAYED_CLASSES = [cls for cls in CORPUS.classes() if cls != REFUSED_CLASS]
# Bad inputs per batch: the rest of SQS's ten are good companions.
BAD_PER_BATCH = 8
COMPANIONS = 2
DEAD_LETTERED = "job dead-lettered"

_SQS_TEXT = re.compile(f"[{limits.SQS_BODY_CHARACTERS}]+")
# https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-message-metadata.html
# "A number can have up to 38 digits of precision, and it can be between 10^-128 and 10^+126."
SQS_NUMBER_DIGITS = 38
SQS_NUMBER_EXPONENTS = (-128, 126)
_ids = itertools.count()


# --- fixtures: one moto for the module ------------------------------------------------------------


# The drivers' clock stands still at the corpus's instant, where a rate bucket never refills: the good
# companions of every batch would end up snoozed. The destinations keep their names, not their limits.
UNLIMITED = replace(
    TOPOLOGY,
    destinations=tuple(
        replace(destination, rate=None, concurrency=None, breaker=None, retry_budget=None)
        for destination in TOPOLOGY.destinations
    ),
)


@pytest.fixture(scope="module")
def app() -> Iterator[Aws]:
    yield from moto_aws(UNLIMITED)


@pytest.fixture(scope="module")
def drivers(app: Aws) -> dict[str, QueueDriver]:
    queues = {queue.name: QueueDriver(app, queue.name) for queue in UNLIMITED.queues}
    for driver in queues.values():
        driver.now = CORPUS.now
    return queues


@pytest.fixture(scope="module")
def effects(app: Aws) -> EffectsLedger:
    return EffectsLedger(client=app.dynamodb)


# --- what SQS would take ---------------------------------------------------------------------


def sqs_number_problem(text: str) -> str | None:
    try:
        number = Decimal(text)
    except InvalidOperation:
        return "not a number"
    if not number.is_finite():
        return "not finite"
    if number == 0:
        return None
    digits = len(number.normalize().as_tuple().digits)
    low, high = SQS_NUMBER_EXPONENTS
    if digits > SQS_NUMBER_DIGITS:
        return f"{digits} digits of precision, over {SQS_NUMBER_DIGITS}"
    if not low <= number.copy_abs().adjusted() <= high:
        return "out of range"
    return None


def assert_sqs_takes(body: str, attributes: Mapping[str, Mapping[str, str]], *, what: str) -> None:
    """Every string value is in SQS's alphabet, every Number within its precision, the whole within 1 MiB."""
    for name, value in attributes.items():
        text = value.get("StringValue", "")
        assert _SQS_TEXT.fullmatch(text), f"{what}: SQS refuses attribute {name}'s characters: {text[:80]!r}"
        if value["DataType"].startswith("Number"):
            problem = sqs_number_problem(text)
            assert problem is None, f"{what}: SQS refuses Number attribute {name} ({problem}): {text[:80]!r}"
    assert message_bytes(body, attributes) <= limits.SQS_MAX_MESSAGE_BYTES, f"{what}: over SQS's size limit"


# --- a batch -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class DeadLetter:
    body: str
    attributes: dict[str, dict[str, str]]

    def attribute(self, name: str) -> str | None:
        value = self.attributes.get(name)
        return value["StringValue"] if value else None


def companion(queue: str) -> tuple[str, str, str]:
    """A good job for ``queue``: its body, its job id and the effect key it applies once."""
    ident = f"good-{next(_ids)}"
    if queue == "critical":
        body = envelope("charge_order", {"order_id": ident, "amount_cents": 500, "currency": "EUR"}, job_id=ident)
        return body, ident, f"payments:charge:{ident}"
    if queue == "bulk":
        url = f"https://hooks.example/{ident}"
        data = {"url": url, "event_id": f"evt-{ident}", "body": "{}"}
        return envelope("deliver_webhook", data, job_id=ident), ident, f"webhooks:{url}:evt-{ident}"
    body = envelope("send_welcome_email", {"user_id": ident, "locale": "en"}, v=2, job_id=ident)
    return body, ident, f"email:welcome-en:{ident}@users.example"


def delete(aws: Aws, url: str, receipt_handles: Sequence[str]) -> None:
    for start in range(0, len(receipt_handles), limits.SQS_MAX_BATCH_ENTRIES):
        chunk = receipt_handles[start : start + limits.SQS_MAX_BATCH_ENTRIES]
        entries = [{"Id": str(index), "ReceiptHandle": handle} for index, handle in enumerate(chunk)]
        assert not aws.sqs.delete_message_batch(QueueUrl=url, Entries=entries).get("Failed")


def drain(aws: Aws, url: str) -> list[DeadLetter]:
    """Every message on ``url`` (a DLQ), received and deleted."""
    letters: list[DeadLetter] = []
    while True:
        messages = aws.receive(url)
        letters += [DeadLetter(message["Body"], message.get("MessageAttributes", {})) for message in messages]
        delete(aws, url, [message["ReceiptHandle"] for message in messages])
        if len(messages) < limits.SQS_MAX_RECEIVE_MESSAGES:
            return letters


def in_queue(driver: QueueDriver) -> dict[str, int]:
    names = [
        "ApproximateNumberOfMessages",
        "ApproximateNumberOfMessagesNotVisible",
        "ApproximateNumberOfMessagesDelayed",
    ]
    counts = driver.aws.sqs.get_queue_attributes(QueueUrl=driver.url, AttributeNames=names)["Attributes"]
    return {name: int(counts[name]) for name in names}


def dead_letter_logs(stream: io.StringIO, start: int) -> list[dict[str, Any]]:
    lines = stream.getvalue()[start:].split("\n")  # not splitlines(): a log line may hold U+2028 or U+0085
    records = [json.loads(line) for line in lines if line.startswith("{")]
    return [record for record in records if record.get("message") == DEAD_LETTERED]


def good_job_id(entry: BadInput) -> str:
    return str(json.loads(entry.body)["id"])


def replay(
    driver: QueueDriver, entries: Sequence[BadInput], effects: EffectsLedger, logs: io.StringIO
) -> list[DeadLetter]:
    """Send ``entries`` with good companions as one batch, run it, and check how every message ended."""
    assert len(entries) + COMPANIONS <= limits.SQS_MAX_RECEIVE_MESSAGES
    before = in_queue(driver)
    driver.outcomes.clear()
    sent = {driver.send(entry.body, attributes=entry.attributes or None): entry for entry in entries}
    companions = [companion(driver.name) for _ in range(COMPANIONS)]
    batch = [{"Id": str(index), "MessageBody": body} for index, (body, _, _) in enumerate(companions)]
    assert not driver.aws.sqs.send_message_batch(QueueUrl=driver.url, Entries=batch).get("Failed")
    records = driver.receive()
    names = [entry.name for entry in entries]
    start = len(logs.getvalue())
    try:
        failed = driver.run(*records)
    finally:
        # The event source mapping deletes the records not reported failed; the failed ones (a
        # failure of this test) go too, so that the next batch starts from a clean queue.
        delete(driver.aws, driver.url, [record["receiptHandle"] for record in records])
        letters = drain(driver.aws, driver.dlq_url)

    assert len(records) == len(entries) + COMPANIONS, f"{names}: received {len(records)} messages"
    assert all(int(record["attributes"]["ApproximateReceiveCount"]) == 1 for record in records)
    assert [sent[message_id].name for message_id in failed if message_id in sent] == [], "reported for redelivery"
    assert failed == [], "a good companion was reported for redelivery"
    for letter in letters:
        assert_sqs_takes(letter.body, letter.attributes, what=f"a dead letter of {names}")
    unclaimed = list(letters)
    bad = [entry for entry in entries if entry.expected_reason is not None]
    for entry in bad:
        mine = [letter for letter in unclaimed if letter.body == entry.body]
        assert len(mine) == 1, f"{entry.name} ({entry.note}): {len(mine)} dead letters with its body, not 1"
        letter = mine[0]
        unclaimed.remove(letter)
        reason = letter.attribute(attrs.REASON)
        assert reason == entry.expected_reason, f"{entry.name} ({entry.note}): {reason}, not {entry.expected_reason}"
        assert letter.attribute(attrs.SOURCE_QUEUE) == driver.name
        if attrs.PRIOR_ATTEMPTS not in entry.attributes:
            assert letter.attribute(attrs.ATTEMPTS) == "1", f"{entry.name}: dead-lettered after a retry"
    wrongly = [
        entry.name for entry in entries if entry.expected_reason is None and entry.body in {x.body for x in unclaimed}
    ]
    assert wrongly == [], (
        f"good inputs dead-lettered: {[(x.attribute(attrs.REASON), x.attribute(attrs.ERROR)) for x in unclaimed]}"
    )
    assert len(unclaimed) == 0, "good companions were dead-lettered"
    expected = Counter((Kind.DEAD_LETTERED, entry.expected_reason) for entry in bad)
    expected[(Kind.SUCCEEDED, None)] = len(entries) - len(bad) + COMPANIONS
    outcomes = Counter((outcome.kind, outcome.reason) for outcome in driver.outcomes)
    assert outcomes == expected, f"{names}: outcomes {dict(outcomes)}"
    succeeded = {outcome.job_id for outcome in driver.outcomes if outcome.kind is Kind.SUCCEEDED}
    good = {good_job_id(entry) for entry in entries if entry.expected_reason is None}
    assert good | {ident for _, ident, _ in companions} <= succeeded
    for _, _, effect in companions:
        assert effects.get(effect) == Effect(calls=1, applied=1), effect
    logged = Counter(record["reason"] for record in dead_letter_logs(logs, start))
    assert logged == Counter(entry.expected_reason.value for entry in bad if entry.expected_reason), "dead-letter logs"
    assert in_queue(driver) == before, f"{names}: left on the queue (in flight, delayed or visible)"
    return letters


def batches(entries: Sequence[BadInput]) -> Iterator[tuple[str, list[BadInput]]]:
    for queue in dict.fromkeys(entry.queue for entry in entries):
        mine = [entry for entry in entries if entry.queue == queue]
        for start in range(0, len(mine), BAD_PER_BATCH):
            yield queue, mine[start : start + BAD_PER_BATCH]


# --- the corpus ----------------------------------------------------------------------------------


@pytest.mark.parametrize("cls", REPLAYED_CLASSES)
def test_each_bad_input_is_dead_lettered_with_its_reason_while_its_batch_completes(
    cls: str, drivers: dict[str, QueueDriver], effects: EffectsLedger, logs: io.StringIO
) -> None:
    entries = [entry for entry in CORPUS.entries if entry.cls == cls]
    for queue, batch in batches(entries):
        replay(drivers[queue], batch, effects, logs)


@pytest.mark.provokes_refusals
def test_bodies_sqs_refuses_are_refused_at_send_and_never_reach_a_worker(app: Aws) -> None:
    refused = [entry for entry in CORPUS.entries if entry.cls == REFUSED_CLASS]
    assert refused
    url = app.queue_url("default")
    for entry in refused:
        with pytest.raises(ClientError) as error:
            app.sqs.send_message(QueueUrl=url, MessageBody=entry.body)
        assert error.value.response["Error"]["Code"].endswith(str(entry.expected_refusal)), entry.name
    assert app.receive(url, visibility=0) == []


def test_the_committed_corpus_is_what_its_generator_writes() -> None:
    """Reproducible: the same hypothesis release draws the same cases (``python -m chaos.corpus`` rewrites it)."""
    assert hypothesis.__version__ == HYPOTHESIS_VERSION, "the corpus is drawn with a pinned hypothesis release"
    assert render(generate()) == DEFAULT_OUTPUT.read_text(encoding="ascii"), "run: python -m chaos.corpus"


def test_every_class_the_corpus_promises_is_in_it() -> None:
    classes = set(CORPUS.classes())
    promised = {
        "malformed_json",
        "non_object_json",
        "missing_envelope_fields",
        "wrong_envelope_field_types",
        "unknown_job_type",
        "unsupported_version",
        "payload_size",
        "refused_by_sqs",
        "control_characters",
        "deep_nesting",
        "huge_numbers",
        "very_long_ids",
        "trailing_garbage",
        "byte_order_mark",
        "hostile_attributes",
        "nonsense_created_at",
        *(f"invalid_payload_{job_type.name}" for job_type in TOPOLOGY.job_types),
    }
    assert promised <= classes
    sized = [entry for entry in CORPUS.entries if entry.cls == "payload_size"]
    limit = TOPOLOGY.job_type("summarize_day").max_payload_bytes
    assert {len(entry.body.encode()) - limit for entry in sized if entry.queue == "default"} >= {0, 1}
    assert all((entry.expected_reason is None) == (len(entry.body.encode()) <= limit) for entry in sized), (
        "just under is good, just over is payload_too_large"
    )


# --- the defects the corpus found, one named test each ---------------------------------------------


def one(
    name: str,
    body: str,
    expected: Reason | None,
    *,
    queue: str = "default",
    attributes: dict[str, dict[str, str]] | None = None,
) -> BadInput:
    """An input outside the corpus, replayed the same way."""
    return BadInput(
        cls="named", name=name, queue=queue, parts=((body, 1),), expected_reason=expected, attributes=attributes or {}
    )


def welcome(ident: str, **fields: Any) -> str:
    document = json.loads(envelope("send_welcome_email", {"user_id": ident, "locale": "en"}, v=2, job_id=ident))
    return json.dumps(document | fields)


def string(value: str) -> dict[str, str]:
    return {"DataType": "String", "StringValue": value}


def number(value: str) -> dict[str, str]:
    return {"DataType": "Number", "StringValue": value}


@pytest.mark.parametrize("created_at", ["9999-12-31T23:59:59-01:00", "0001-01-01T00:00:00+01:00"])
def test_created_at_outside_the_years_utc_can_hold_is_an_invalid_envelope_not_a_crash(
    created_at: str, drivers: dict[str, QueueDriver], effects: EffectsLedger, logs: io.StringIO
) -> None:
    """Was: OverflowError out of the envelope's UTC conversion; the record failed on every delivery."""
    body = welcome(f"utc-range-{created_at[:4]}", created_at=created_at)
    replay(drivers["default"], [one("created_at out of range", body, Reason.INVALID_ENVELOPE)], effects, logs)


@pytest.mark.parametrize("created_at", [1893499140, "1893499140", 0.5])
def test_created_at_given_as_a_number_is_an_invalid_envelope(
    created_at: Any, drivers: dict[str, QueueDriver], effects: EffectsLedger, logs: io.StringIO
) -> None:
    """Was: read as Unix time, so the job ran (or, for 0.5, was dead-lettered as deadline_exceeded)."""
    body = welcome(f"numeric-created-at-{created_at}", created_at=created_at)
    replay(drivers["default"], [one("numeric created_at", body, Reason.INVALID_ENVELOPE)], effects, logs)


@pytest.mark.parametrize("created_at", ["2030-01-01 11:59:00Z", "2030-01-01t11:59:00z", "2030-01-01T13:29:00+01:30"])
def test_every_rfc_3339_form_of_created_at_is_still_read(
    created_at: str, drivers: dict[str, QueueDriver], effects: EffectsLedger, logs: io.StringIO
) -> None:
    body = welcome(f"rfc3339-{created_at}", created_at=created_at)
    replay(drivers["default"], [one("rfc 3339", body, None)], effects, logs)


@pytest.mark.parametrize("body", ["NaN", "-Infinity", '{"type": "send_welcome_email", "v": NaN}'])
def test_nan_and_infinity_are_not_json(
    body: str, drivers: dict[str, QueueDriver], effects: EffectsLedger, logs: io.StringIO
) -> None:
    """Was: Python's parser read them, so the body was dead-lettered as invalid_envelope."""
    replay(drivers["default"], [one("NaN", body, Reason.INVALID_JSON)], effects, logs)


@pytest.mark.parametrize("prior", ["²", "٣", "9" * 60])
def test_a_prior_attempts_the_harness_never_writes_is_ignored_not_a_crash(
    prior: str, drivers: dict[str, QueueDriver], effects: EffectsLedger, logs: io.StringIO
) -> None:
    """Was: "²" passed isdigit() and int() refused it: the record failed on every delivery."""
    good = one("prior_attempts", welcome(f"prior-{len(prior)}-{ord(prior[0])}"), None)
    bad = one("prior_attempts on a bad body", "{prior", Reason.INVALID_JSON)
    forged = {attrs.PRIOR_ATTEMPTS: string(prior)}
    (letter,) = replay(
        drivers["default"], [replace(good, attributes=forged), replace(bad, attributes=forged)], effects, logs
    )
    assert letter.attribute(attrs.ATTEMPTS) == "1"


def test_a_dead_letters_attempt_count_is_a_number_sqs_takes_whatever_prior_attempts_said(
    drivers: dict[str, QueueDriver], effects: EffectsLedger, logs: io.StringIO
) -> None:
    """Was: a 60-digit forged count went into conveyor.attempts, a Number SQS refuses past 38 digits."""
    entry = one("60 digits", "{sixty", Reason.INVALID_JSON, attributes={attrs.PRIOR_ATTEMPTS: number("1" + "0" * 59)})
    (letter,) = replay(drivers["default"], [entry], effects, logs)
    assert letter.attribute(attrs.ATTEMPTS) == "1"


@contextmanager
def handled(driver: QueueDriver) -> Iterator[list[Record]]:
    """Records received inside are deleted, and the DLQ drained, on the way out, however the test ended."""
    records: list[Record] = []
    try:
        yield records
    finally:
        delete(driver.aws, driver.url, [record["receiptHandle"] for record in records])
        drain(driver.aws, driver.dlq_url)


# 10**9: past any job's max_attempts; 20: past send_welcome_email's 5, under the largest allowed (25).
@pytest.mark.parametrize("prior", ["1000000000", "20"])
def test_a_forged_prior_attempts_past_max_attempts_does_not_exhaust_a_failing_job(
    prior: str, drivers: dict[str, QueueDriver], effects: EffectsLedger
) -> None:
    """Was: the job's first transient failure was its last (attempts_exhausted), on its first delivery."""
    default = drivers["default"]
    default.outcomes.clear()
    user = f"flaky-1-forged-{next(_ids)}"
    default.send(welcome(user), attributes={attrs.PRIOR_ATTEMPTS: number(prior)})
    with handled(default) as records:
        records.append(first := default.receive_one())
        assert default.run(first) == [first["messageId"]], "a transient failure is retried"
        records.append(again := default.redeliver(first))
        assert default.run(again) == []
        assert drain(default.aws, default.dlq_url) == []

    assert [(outcome.kind, outcome.attempt) for outcome in default.outcomes] == [(Kind.RETRIED, 1), (Kind.SUCCEEDED, 2)]
    assert effects.get(f"email:welcome-en:{user}@users.example") == Effect(calls=2, applied=1)


def test_a_prior_attempts_below_max_attempts_is_honoured_as_a_snoozes_copy_carries_it(
    drivers: dict[str, QueueDriver],
) -> None:
    """The rule's other side: a count the harness could have written is spent, forged or not."""
    default = drivers["default"]
    max_attempts = TOPOLOGY.job_type("send_welcome_email").retry.max_attempts
    body = welcome(f"flaky-1-honoured-{next(_ids)}")
    default.send(body, attributes={attrs.PRIOR_ATTEMPTS: number(str(max_attempts - 1))})
    with handled(default) as records:
        records.append(record := default.receive_one())
        assert default.run(record) == []
        (letter,) = [letter for letter in drain(default.aws, default.dlq_url) if letter.body == body]

    assert letter.attribute(attrs.REASON) == Reason.ATTEMPTS_EXHAUSTED
    assert letter.attribute(attrs.ATTEMPTS) == str(max_attempts)


@pytest.mark.parametrize(
    ("not_before", "created_at"),
    [
        ("9999-12-31T23:59:59Z", None),
        # Within a day of its (future) created_at, but more than a day from now: never in time either.
        ("9999-12-31T12:00:00Z", "9999-12-31T00:00:00Z"),
    ],
)
def test_a_not_before_past_the_jobs_max_wall_time_is_dead_lettered_at_once_not_parked(
    not_before: str, created_at: str | None, drivers: dict[str, QueueDriver], effects: EffectsLedger, logs: io.StringIO
) -> None:
    """Was: re-sent every 15 minutes (SQS's longest delay) until 9999, each hop acked: parked for ever."""
    fields = {"created_at": created_at} if created_at else {}
    body = welcome(f"not-before-{next(_ids)}", **fields)
    entry = one("not_before", body, Reason.DEADLINE_EXCEEDED, attributes={attrs.NOT_BEFORE: string(not_before)})
    default = drivers["default"]
    with requests_to(default.aws.sqs, "SendMessage") as sends:
        (letter,) = replay(default, [entry], effects, logs)
    assert len([send for send in sends if send["QueueUrl"] == default.url and send["MessageBody"] == body]) == 1, (
        "sent once, never re-sent"
    )
    assert "not before" in str(letter.attribute(attrs.ERROR))


def test_a_not_before_within_the_jobs_max_wall_time_snoozes_it_until_then(
    drivers: dict[str, QueueDriver], effects: EffectsLedger
) -> None:
    """What a sender gets by forging not_before: its own job delayed, at most to its deadline."""
    default = drivers["default"]
    default.outcomes.clear()
    user = f"snoozed-{next(_ids)}"
    not_before = CORPUS.now + timedelta(hours=1)
    default.send(welcome(user), attributes={attrs.NOT_BEFORE: string(not_before.isoformat())})
    with handled(default) as records, requests_to(default.aws.sqs, "SendMessage") as sends:
        records.append(record := default.receive_one())
        assert default.run(record) == []  # the copy stays on the queue, delayed, for the rest of the run

    assert [outcome.kind for outcome in default.outcomes] == [Kind.SNOOZED]
    (copy,) = sends
    assert_sqs_takes(copy["MessageBody"], copy["MessageAttributes"], what="the snoozed copy")
    assert copy["DelaySeconds"] == int(limits.SQS_MAX_DELAY.total_seconds())
    assert copy["MessageAttributes"][attrs.NOT_BEFORE]["StringValue"] == not_before.isoformat().replace("+00:00", "Z")
    assert effects.get(f"email:welcome-en:{user}@users.example") is None, "not run yet"


@pytest.mark.parametrize("name", [attrs.NOT_BEFORE, attrs.REDRIVEN_AT, attrs.FIRST_FAILED_AT])
def test_a_time_stamp_attribute_outside_the_years_utc_can_hold_is_ignored_not_a_crash(
    name: str, drivers: dict[str, QueueDriver], effects: EffectsLedger, logs: io.StringIO
) -> None:
    """Was: OverflowError out of reading the attribute; the record failed on every delivery."""
    forged = {name: string("9999-12-31T23:59:59-14:00")}
    good = one(name, welcome(f"stamp-{next(_ids)}"), None, attributes=forged)
    bad = one(name, welcome(f"stamp-{next(_ids)}", data={}), Reason.INVALID_PAYLOAD, attributes=forged)
    replay(drivers["default"], [good, bad], effects, logs)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("type", "\u0000send_welcome_email"),
        ("id", "job-\u0001"),
        ("dedupe_key", "key-\u001b[31m"),
        ("id", "job-\uffff"),
    ],
)
def test_an_identifier_holding_a_character_sqs_cannot_carry_is_an_invalid_envelope(
    field: str, value: str, drivers: dict[str, QueueDriver], effects: EffectsLedger, logs: io.StringIO
) -> None:
    """Was: an unknown type's dead letter carried it in conveyor.job_type, which SQS refuses; such an id ran."""
    body = json.dumps(json.loads(welcome(f"identifier-{next(_ids)}")) | {field: value}, ensure_ascii=True)
    (letter,) = replay(drivers["default"], [one(field, body, Reason.INVALID_ENVELOPE)], effects, logs)
    assert field in str(letter.attribute(attrs.ERROR))


def test_a_dead_letters_error_quoting_a_character_sqs_refuses_carries_a_replacement(
    drivers: dict[str, QueueDriver], effects: EffectsLedger, logs: io.StringIO
) -> None:
    """Was: the payload key "\x00" went into conveyor.error as it was; SQS refuses that attribute."""
    ident = f"nul-key-{next(_ids)}"
    body = json.dumps(json.loads(welcome(ident)) | {"data": {"user_id": ident, "\u0000": 1}}, ensure_ascii=True)
    (letter,) = replay(drivers["default"], [one("NUL key", body, Reason.INVALID_PAYLOAD)], effects, logs)
    assert letter.attribute(attrs.ERROR) == "\ufffd: Extra inputs are not permitted"


def test_a_body_too_big_for_all_its_dead_letter_attributes_keeps_its_reason(
    drivers: dict[str, QueueDriver], effects: EffectsLedger, logs: io.StringIO
) -> None:
    """Was: body and attributes passed SQS's 1 MiB, the DLQ refused the send, the record failed for ever."""
    body = "{" + "x" * (limits.SQS_MAX_MESSAGE_BYTES - 256 - 1)
    (letter,) = replay(drivers["default"], [one("1 MiB less 256 bytes", body, Reason.INVALID_JSON)], effects, logs)
    assert message_bytes(letter.body, letter.attributes) <= limits.SQS_MAX_MESSAGE_BYTES
    assert attrs.ERROR not in letter.attributes, "the largest attribute is the one left out"
    assert "too large for all its attributes" in logs.getvalue()


def test_a_body_at_sqss_limit_is_dead_lettered_whole_without_attributes_and_its_reason_logged(
    drivers: dict[str, QueueDriver], logs: io.StringIO
) -> None:
    """No attribute fits beside a 1 MiB body: it goes to the DLQ on its first delivery anyway, reason in the log.

    (`conveyor dlq` shows such an entry as SQS's own receive_limit, which has no attributes either.)
    """
    default = drivers["default"]
    body = "{" + "x" * (limits.SQS_MAX_MESSAGE_BYTES - 1)
    default.send(body)
    start = len(logs.getvalue())
    with handled(default) as records:
        records.append(record := default.receive_one())
        assert default.run(record) == []
        (letter,) = drain(default.aws, default.dlq_url)

    assert letter.body == body
    assert letter.attributes == {}
    assert [entry["reason"] for entry in dead_letter_logs(logs, start)] == [Reason.INVALID_JSON]


def test_an_unknown_type_of_any_length_is_dead_lettered_with_its_name_cut_short(
    drivers: dict[str, QueueDriver], effects: EffectsLedger, logs: io.StringIO
) -> None:
    """Was: a 600,000-character type went whole into conveyor.job_type, and the dead letter passed 1 MiB."""
    body = welcome(f"long-type-{next(_ids)}", type="t" * 600_000)
    (letter,) = replay(drivers["default"], [one("long type", body, Reason.UNKNOWN_TYPE)], effects, logs)
    job_type = str(letter.attribute(attrs.JOB_TYPE))
    assert len(job_type) == 256
    assert job_type.startswith("ttt")


def test_an_id_that_reads_like_an_occurrence_but_names_no_instant_runs_as_a_plain_job(
    drivers: dict[str, QueueDriver], effects: EffectsLedger, logs: io.StringIO
) -> None:
    """Was: ValueError out of the schedule's audit: the job was retried until attempts_exhausted, and a bad
    payload's dead letter was sent again on every delivery (the audit failed after the DLQ send)."""
    ident = "schedule:nightly-report@2030-13-45T02:00:00Z"
    document = json.loads(envelope("summarize_day", {"report": "orders"}, job_id=ident))
    good = one("impossible occurrence", json.dumps(document), None)
    bad = one(
        "impossible occurrence, bad payload", json.dumps(document | {"data": {"report": ""}}), Reason.INVALID_PAYLOAD
    )
    replay(drivers["default"], [good, bad], effects, logs)
    assert effects.get(f"reports:summary:{ident}") == Effect(calls=1, applied=1)
