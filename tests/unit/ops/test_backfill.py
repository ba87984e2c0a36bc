"""`conveyor enqueue` and `conveyor backfill`: validated before sending, paced, resumable without duplicates or gaps."""

import hashlib
import json
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from conveyor.contract.declarations import Queue
from conveyor.contract.envelope import Envelope, parse_envelope
from conveyor.contract.topology import Topology
from conveyor.ops.backfill import (
    BackfillIncompleteError,
    BackfillSummary,
    Checkpoint,
    InvalidBackfillError,
    backfill_job_id,
    default_checkpoint,
    plan_backfill,
)
from conveyor.sdk.client import JobClient
from conveyor.sdk.jobs import Job, job
from functions.jobs.send_welcome_email import send_welcome_email
from functions.topology import TOPOLOGY
from tests.aws import Aws
from tests.cli_support import conveyor
from tests.fixtures.small_topology import Ping
from tests.unit.ops.test_rate import FakeClock

WELCOME = send_welcome_email.name


def welcome_lines(count: int, *, first: int = 1) -> list[str]:
    return [json.dumps({"user_id": f"u-{n}"}) for n in range(first, first + count)]


def write_lines(path: Path, lines: list[str], *, final_newline: bool = True) -> Path:
    path.write_text("\n".join(lines) + ("\n" if final_newline else ""), encoding="utf-8")
    return path


def expected_ids(lines: list[str]) -> set[str]:
    """The id each non-blank line must carry, by its line number and payload."""
    return {backfill_job_id(WELCOME, number, json.loads(text)) for number, text in enumerate(lines, 1) if text.strip()}


def received(aws: Aws, queue: str = "default") -> list[Envelope]:
    envelopes: list[Envelope] = []
    while batch := aws.receive(aws.queue_url(queue)):
        envelopes.extend(parse_envelope(message["Body"]) for message in batch)
    return envelopes


def backfill(
    sqs: Any,
    path: Path,
    *,
    restart: bool = False,
    rate: float | None = None,
    clock: FakeClock | None = None,
) -> BackfillSummary:
    plan = plan_backfill(TOPOLOGY, send_welcome_email, path, restart=restart)
    clock = clock or FakeClock()
    client = JobClient(TOPOLOGY, sqs_client=sqs, sleep=lambda _: None)
    return plan.run(client, rate=rate, clock=clock, sleep=clock.sleep)


def checkpoint_of(path: Path) -> Checkpoint:
    return Checkpoint.model_validate_json(default_checkpoint(path).read_text())


def batch_sizes(aws: Aws) -> list[int]:
    sizes: list[int] = []
    aws.sqs.meta.events.register(
        "provide-client-params.sqs.SendMessageBatch", lambda params, **_: sizes.append(len(params["Entries"]))
    )
    return sizes


class CrashAfterSends:
    """An SQS client that dies right after its Nth batch reached the queue: before the checkpoint is written."""

    def __init__(self, sqs: Any, sends: int) -> None:
        self._sqs = sqs
        self._left = sends

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sqs, name)

    def send_message_batch(self, **params: Any) -> Any:
        response = self._sqs.send_message_batch(**params)
        self._left -= 1
        if not self._left:
            raise KeyboardInterrupt
        return response


class RefusesEntries:
    """An SQS client whose Nth batch call refuses the given entry ids as the sender's fault (never retried)."""

    def __init__(self, sqs: Any, *, call: int, entry_ids: set[str]) -> None:
        self._sqs = sqs
        self._call = call
        self._entry_ids = entry_ids

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sqs, name)

    def send_message_batch(self, **params: Any) -> Any:
        self._call -= 1
        if self._call:
            return self._sqs.send_message_batch(**params)
        kept = [entry for entry in params["Entries"] if entry["Id"] not in self._entry_ids]
        response = self._sqs.send_message_batch(**{**params, "Entries": kept})
        response["Failed"] = [
            {"Id": entry_id, "SenderFault": True, "Code": "InvalidParameterValue", "Message": "refused by the test"}
            for entry_id in sorted(self._entry_ids)
        ]
        return response


# --- the backfill itself ---------------------------------------------------------------------------------


def test_a_backfill_sends_one_job_per_line_with_ids_derived_from_the_line(aws: Aws, tmp_path: Path) -> None:
    lines = [*welcome_lines(12), "", *welcome_lines(13, first=13), "  "]
    path = write_lines(tmp_path / "users.jsonl", lines)
    sizes = batch_sizes(aws)

    summary = backfill(aws.sqs, path)

    envelopes = received(aws)
    assert {envelope.id for envelope in envelopes} == expected_ids(lines)
    assert len(envelopes) == 25
    assert sorted(envelope.data["user_id"] for envelope in envelopes) == sorted(f"u-{n}" for n in range(1, 26))
    assert sizes == [10, 10, 5]
    assert summary == BackfillSummary(
        job_type=WELCOME, file=str(path), sent=25, skipped_already_done=0, total_lines=25, complete=True
    )
    assert checkpoint_of(path) == Checkpoint(
        file=str(path.resolve()),
        job_type=WELCOME,
        lines_done=len(lines),
        sha256=hashlib.sha256("".join(line + "\n" for line in lines).encode()).hexdigest(),
        complete=True,
    )


def test_job_ids_are_fixed_by_type_line_and_payload_not_by_formatting() -> None:
    job_id = backfill_job_id(WELCOME, 7, {"user_id": "u-1", "locale": "fr"})
    assert job_id == "dfce9893-b35c-57cf-afab-978c8fe1571c"
    assert backfill_job_id(WELCOME, 7, json.loads('{ "locale" : "fr",  "user_id": "u-1" }')) == job_id
    assert backfill_job_id(WELCOME, 8, {"user_id": "u-1", "locale": "fr"}) != job_id
    assert backfill_job_id("charge_order", 7, {"user_id": "u-1", "locale": "fr"}) != job_id


def test_an_interrupted_backfill_resumes_with_exactly_the_remaining_lines(aws: Aws, tmp_path: Path) -> None:
    lines = welcome_lines(25)
    path = write_lines(tmp_path / "users.jsonl", lines)
    clock = FakeClock()
    interrupt_at = 15

    def sleep_then_interrupt(seconds: float) -> None:
        if len(clock.sleeps) == interrupt_at - 1:
            raise KeyboardInterrupt
        clock.sleep(seconds)

    plan = plan_backfill(TOPOLOGY, send_welcome_email, path)
    with pytest.raises(KeyboardInterrupt):
        plan.run(JobClient(TOPOLOGY, sqs_client=aws.sqs), rate=10, clock=clock, sleep=sleep_then_interrupt)
    assert checkpoint_of(path).lines_done == 10
    assert not checkpoint_of(path).complete

    summary = backfill(aws.sqs, path)

    ids = [envelope.id for envelope in received(aws)]
    assert len(ids) == len(set(ids)) == 25
    assert set(ids) == expected_ids(lines)
    assert (summary.sent, summary.skipped_already_done, summary.complete) == (15, 10, True)


def test_a_crash_between_a_send_and_its_checkpoint_repeats_that_batch_under_the_same_ids(
    aws: Aws, tmp_path: Path
) -> None:
    lines = welcome_lines(25)
    path = write_lines(tmp_path / "users.jsonl", lines)
    with pytest.raises(KeyboardInterrupt):
        backfill(CrashAfterSends(aws.sqs, sends=2), path)
    assert checkpoint_of(path).lines_done == 10

    backfill(aws.sqs, path)

    counts = Counter(envelope.id for envelope in received(aws))
    assert set(counts) == expected_ids(lines)
    assert sorted(counts.values()) == [1] * 15 + [2] * 10  # lines 11-20, which the worker's idempotency absorbs


@pytest.mark.parametrize(
    ("refused", "not_accepted", "checkpoint", "sent_twice"),
    [
        # Entry ids are positions in the second batch, lines 11-20.
        ({"3", "5"}, "lines 14, 16", 13, {15, 17, 18, 19, 20}),
        ({"0"}, "line 11", 10, set(range(12, 21))),
    ],
)
def test_a_partly_accepted_batch_checkpoints_its_accepted_head_and_names_the_rest(
    aws: Aws, tmp_path: Path, refused: set[str], not_accepted: str, checkpoint: int, sent_twice: set[int]
) -> None:
    lines = welcome_lines(25)
    path = write_lines(tmp_path / "users.jsonl", lines)
    with pytest.raises(BackfillIncompleteError) as raised:
        backfill(RefusesEntries(aws.sqs, call=2, entry_ids=refused), path)
    assert str(raised.value) == (
        f"SQS did not accept {not_accepted} (InvalidParameterValue: refused by the test); "
        f"the checkpoint is at line {checkpoint}: run again to resume"
    )
    assert checkpoint_of(path).lines_done == checkpoint

    summary = backfill(aws.sqs, path)

    counts = Counter(envelope.id for envelope in received(aws))
    assert set(counts) == expected_ids(lines)
    # Accepted after the gap, so sent again on resume: the worker's idempotency absorbs them.
    twice = {job_id for job_id, count in counts.items() if count == 2}
    assert twice == expected_ids([line if n in sent_twice else "" for n, line in enumerate(lines, 1)])
    assert sum(counts.values()) == 25 + len(sent_twice)
    assert (summary.sent, summary.skipped_already_done) == (25 - checkpoint, checkpoint)


def test_a_complete_backfill_sends_only_lines_appended_since(aws: Aws, tmp_path: Path) -> None:
    path = write_lines(tmp_path / "users.jsonl", welcome_lines(3), final_newline=False)
    backfill(aws.sqs, path)
    assert plan_backfill(TOPOLOGY, send_welcome_email, path).already_complete

    lines = welcome_lines(5)
    write_lines(path, lines)
    summary = backfill(aws.sqs, path)

    assert (summary.sent, summary.skipped_already_done, summary.total_lines) == (2, 3, 5)
    ids = [envelope.id for envelope in received(aws)]
    assert sorted(ids) == sorted(expected_ids(lines))


@pytest.mark.parametrize("edit", ["change", "truncate"])
def test_a_file_whose_sent_lines_changed_is_refused_until_restart(aws: Aws, tmp_path: Path, edit: str) -> None:
    lines = welcome_lines(12)
    path = write_lines(tmp_path / "users.jsonl", lines)
    backfill(aws.sqs, path)
    assert len(received(aws)) == 12
    edited = [*lines[:2], json.dumps({"user_id": "u-other"}), *lines[3:]] if edit == "change" else lines[:11]
    write_lines(path, edited)

    with pytest.raises(InvalidBackfillError, match="the first 12 lines changed since they were sent; pass --restart"):
        plan_backfill(TOPOLOGY, send_welcome_email, path)
    summary = backfill(aws.sqs, path, restart=True)

    assert summary.sent == len(edited)
    assert {envelope.id for envelope in received(aws)} == expected_ids(edited)
    assert checkpoint_of(path).complete


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        ("line 1", "the first 3 lines changed since they were sent"),
        ("line 5", "changed while it was being sent; run again to resume"),
    ],
)
def test_a_file_edited_between_validation_and_sending_sends_nothing_unvalidated(
    aws: Aws, tmp_path: Path, edit: str, message: str
) -> None:
    path = write_lines(tmp_path / "users.jsonl", welcome_lines(3))
    backfill(aws.sqs, path)
    assert len(received(aws)) == 3
    lines = welcome_lines(5)
    write_lines(path, lines)
    plan = plan_backfill(TOPOLOGY, send_welcome_email, path)
    index = int(edit.removeprefix("line ")) - 1
    lines[index] = json.dumps({"user_id": "u-edited"})
    write_lines(path, lines)

    with pytest.raises(InvalidBackfillError, match=message):
        plan.run(JobClient(TOPOLOGY, sqs_client=aws.sqs))

    assert received(aws) == []
    assert checkpoint_of(path).lines_done == 3


@pytest.mark.parametrize(
    ("bad_line", "reason"),
    [
        ('{"user_id": "u-3"', "line 3: not JSON: Expecting ',' delimiter"),
        ('{"user_id": ' + "[" * 5000 + "]" * 5000 + "}", "line 3: not JSON: JSON nested deeper than the parser allows"),
        ('["u-3"]', "line 3: a JSON list, not an object"),
        ("{}", "line 3: user_id: Field required"),
        ('{"user_id": "u-3", "plan": "pro"}', "line 3: plan: Extra inputs are not permitted"),
        ('{"user_id": 3}', "line 3: user_id: Input should be a valid string"),
    ],
)
def test_a_bad_line_is_reported_by_number_and_nothing_is_sent(
    aws: Aws, tmp_path: Path, bad_line: str, reason: str
) -> None:
    lines = welcome_lines(20)
    lines[2] = bad_line
    path = write_lines(tmp_path / "users.jsonl", lines)
    with pytest.raises(InvalidBackfillError) as raised:
        backfill(aws.sqs, path)
    assert str(raised.value).startswith(reason)
    assert received(aws) == []
    assert not default_checkpoint(path).exists()


def test_jobs_are_paced_at_the_rate_in_batches_of_one_second(aws: Aws, tmp_path: Path) -> None:
    path = write_lines(tmp_path / "users.jsonl", welcome_lines(12))
    clock = FakeClock()
    sizes = batch_sizes(aws)
    backfill(aws.sqs, path, rate=4, clock=clock)
    assert clock.sleeps == pytest.approx([0.25] * 11)
    assert sizes == [4, 4, 4]


def test_a_checkpoint_of_another_backfill_is_refused(aws: Aws, tmp_path: Path) -> None:
    path = write_lines(tmp_path / "users.jsonl", welcome_lines(2))
    backfill(aws.sqs, path)
    other = write_lines(tmp_path / "others.jsonl", welcome_lines(2))
    with pytest.raises(InvalidBackfillError, match=f"is for {WELCOME} jobs from {path.resolve()}; pass another"):
        plan_backfill(TOPOLOGY, send_welcome_email, other, checkpoint_path=default_checkpoint(path))
    default_checkpoint(path).write_text('{"lines_done": "many"}')
    with pytest.raises(InvalidBackfillError, match=r"is not a backfill checkpoint \(file: Field required; .*--restart"):
        plan_backfill(TOPOLOGY, send_welcome_email, path)


def test_a_job_type_on_a_fifo_queue_is_refused(tmp_path: Path) -> None:
    ordered: Job[Ping] = job("ordered_ping", queue="ordered", model=Ping)(lambda payload, ctx: None)
    topology = Topology(queues=(Queue("ordered", age_objective=timedelta(minutes=1), fifo=True),), job_types=(ordered,))
    path = write_lines(tmp_path / "pings.jsonl", ["{}"])
    with pytest.raises(InvalidBackfillError, match="runs on FIFO queue 'ordered'; backfill sends to standard queues"):
        plan_backfill(topology, ordered, path)


# --- the command line --------------------------------------------------------------------------------------


def test_jobs_backfill_prints_a_json_summary_and_a_rerun_says_already_complete(aws: Aws, tmp_path: Path) -> None:
    lines = welcome_lines(3)
    path = write_lines(tmp_path / "users.jsonl", lines)

    code, out, err = conveyor("backfill", WELCOME, "--from", str(path), "--rate", "100/s", "--json")
    assert (code, err) == (0, "")
    assert json.loads(out) == {
        "job_type": WELCOME,
        "file": str(path),
        "sent": 3,
        "skipped_already_done": 0,
        "total_lines": 3,
        "complete": True,
    }
    envelopes = received(aws)
    assert {envelope.id for envelope in envelopes} == expected_ids(lines)
    assert {envelope.correlation.origin for envelope in envelopes} == {"conveyor backfill"}

    code, out, _ = conveyor("backfill", WELCOME, "--from", str(path))
    assert code == 0
    assert out.startswith(f"{path}: already complete, 3 {WELCOME} jobs")
    assert received(aws) == []


def test_jobs_backfill_shows_progress_on_stderr_and_a_sentence_on_stdout(aws: Aws, tmp_path: Path) -> None:
    path = write_lines(tmp_path / "users.jsonl", welcome_lines(3))
    code, out, err = conveyor("backfill", WELCOME, "--from", str(path))
    assert code == 0
    assert out.startswith(f"{path}: sent 3 {WELCOME} jobs (0 sent before); all 3 done")
    assert WELCOME in err


@pytest.mark.parametrize(
    ("argv", "code", "message"),
    [
        (["backfill", "send_invoice"], 3, "conveyor: unknown job type 'send_invoice'; declared: charge_order,"),
        (["backfill", WELCOME, "--rate", "0/s"], 2, "Invalid value for '--rate': rate '0/s': expected a positive"),
        (["backfill", WELCOME, "--rate", "fast"], 2, "Invalid value for '--rate'"),
        (["backfill", WELCOME, "--from", "missing.jsonl"], 2, "'missing.jsonl' does not exist"),
    ],
)
def test_jobs_backfill_refuses_bad_arguments_in_one_line(
    aws: Aws, tmp_path: Path, argv: list[str], code: int, message: str
) -> None:
    path = write_lines(tmp_path / "users.jsonl", welcome_lines(1))
    if "--from" not in argv:
        argv = [*argv, "--from", str(path)]
    exit_code, out, err = conveyor(*argv)
    assert (exit_code, out) == (code, "")
    assert len(err.strip().splitlines()) == 1
    assert message in err
    assert received(aws) == []


def test_jobs_backfill_refuses_a_bad_line_and_a_changed_file_with_exit_2(aws: Aws, tmp_path: Path) -> None:
    path = write_lines(tmp_path / "users.jsonl", [*welcome_lines(1), "{}"])
    code, _, err = conveyor("backfill", WELCOME, "--from", str(path))
    assert (code, err) == (2, "conveyor: line 2: user_id: Field required\n")

    write_lines(path, welcome_lines(2))
    assert conveyor("backfill", WELCOME, "--from", str(path))[0] == 0
    write_lines(path, welcome_lines(2, first=5))
    code, _, err = conveyor("backfill", WELCOME, "--from", str(path))
    assert code == 2
    assert err.startswith(f"conveyor: {path}: the first 2 lines changed since they were sent; pass --restart")
    assert len(err.splitlines()) == 1
    code, out, _ = conveyor("backfill", WELCOME, "--from", str(path), "--restart", "--json")
    assert (code, json.loads(out)["sent"]) == (0, 2)


def test_jobs_enqueue_takes_inline_json_and_prints_the_id_and_queue(aws: Aws) -> None:
    code, out, _ = conveyor("enqueue", WELCOME, "--data", '{"user_id": "u-1"}', "--dedupe-key", "signup-1")
    (envelope,) = received(aws)
    assert code == 0
    assert envelope.id in out
    assert "default" in out
    assert envelope.data == {"user_id": "u-1", "locale": "en"}
    assert envelope.dedupe_key == "signup-1"
    assert envelope.correlation.origin == "conveyor enqueue"


def test_jobs_enqueue_reads_data_from_a_file_and_prints_json(aws: Aws, tmp_path: Path) -> None:
    data = tmp_path / "charge.json"
    data.write_text('{"order_id": "o-1", "amount_cents": 1250, "currency": "EUR"}\n')
    code, out, _ = conveyor("enqueue", "charge_order", "--data", f"@{data}", "--json")
    (envelope,) = received(aws, "critical")
    assert code == 0
    assert json.loads(out) == {"job_id": envelope.id, "job_type": "charge_order", "queue": "critical"}
    assert envelope.data == {"order_id": "o-1", "amount_cents": 1250, "currency": "EUR"}


def test_jobs_enqueue_with_a_delay_holds_the_job_back(aws: Aws) -> None:
    code, _, _ = conveyor("enqueue", WELCOME, "--data", '{"user_id": "u-1"}', "--delay", "90s")
    assert code == 0
    assert received(aws) == []


@pytest.mark.parametrize(
    ("argv", "code", "message"),
    [
        (["enqueue", "send_invoice", "--data", "{}"], 3, "conveyor: unknown job type 'send_invoice'; declared:"),
        (
            ["enqueue", "charge_order", "--data", '{"order_id": "o-1", "amount_cents": "12", "currency": "EUR"}'],
            2,
            "conveyor: --data: amount_cents: Input should be a valid integer",
        ),
        (["enqueue", WELCOME, "--data", "{user_id: 1}"], 2, "conveyor: --data: not JSON: Expecting property name"),
        (["enqueue", WELCOME, "--data", "@nowhere.json"], 2, "conveyor: --data @nowhere.json: cannot read it"),
        (["enqueue", WELCOME, "--data", '{"user_id": "u"}', "--delay", "soon"], 2, "Invalid value for '--delay'"),
        (["enqueue", WELCOME, "--data", '{"user_id": "u"}', "--delay", "16m"], 2, "delay must be between 0 and 900s"),
        (["enqueue", WELCOME, "--data", '{"user_id": "u"}', "--dedupe-key", ""], 2, "'--dedupe-key': must not be"),
    ],
)
def test_jobs_enqueue_refuses_bad_input_in_one_line(aws: Aws, argv: list[str], code: int, message: str) -> None:
    exit_code, out, err = conveyor(*argv)
    assert (exit_code, out) == (code, "")
    assert len(err.strip().splitlines()) == 1
    assert message in err
    assert received(aws) == []


def test_jobs_enqueue_to_a_queue_that_does_not_exist_is_not_found(aws: Aws, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONVEYOR_PREFIX", "elsewhere")
    code, _, err = conveyor("enqueue", WELCOME, "--data", '{"user_id": "u-1"}')
    assert code == 3
    assert err == "conveyor: queue elsewhere-default does not exist; deploy the stack, or start `conveyor local up`\n"
