"""The ops CLI against the local runtime, as an operator uses it: `conveyor` commands, real workers.

Each command runs in this process through the console script's entry (tests/e2e/conftest.py
``run_cli``); the backfill killed midway is a process of its own, as only a process can be killed.

What these prove is what operators rely on: a filtered redrive moves exactly what matches; a
dry run changes nothing; a canary that fails again stops the rest; an interrupted redrive,
run again, duplicates no effect; pause stops consumption and resume restarts it; every
change is audited; bad input is one line and a specific exit code.
"""

import json
import signal
import subprocess
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from conveyor.cli.main import main
from conveyor.cli.support import EXIT_INCOMPLETE, EXIT_NO_CREDENTIALS, EXIT_NOT_FOUND, EXIT_UNREACHABLE, EXIT_USAGE
from conveyor.contract.envelope import Envelope, new_job_id
from conveyor.contract.reasons import Reason
from conveyor.local.embedded import free_port
from conveyor.ops.dlq_entries import DlqFilter
from conveyor.ops.rate import RateLimiter
from conveyor.ops.redrive import Redrive
from conveyor.ops.target import Clients, local_target
from conveyor.sdk.prepare import JobRequest
from tests.e2e.conftest import (
    JOBS,
    TOPOLOGY_SPEC,
    CliRun,
    InProcess,
    LocalAws,
    child_environment,
    run_cli,
    wait_until,
)
from tests.fixtures.e2e_topology import QUEUE, TOPOLOGY, record_key

# Long enough for a paused poller to have invoked anything it wrongly would: a long poll already
# waiting as the pause came returns the jobs as soon as they are sent, and must give them back.
PAUSE_OBSERVATION_S = 4.0
EXIT_ABORTED = 130
STALE = timedelta(days=30)


def cli(tmp_path: Path, *argv: str) -> CliRun:
    return run_cli(*argv, workdir=tmp_path / "cli")


def cli_json(tmp_path: Path, *argv: str) -> Any:
    done = cli(tmp_path, *argv, "--json")
    assert done.exit_code == 0, f"conveyor {' '.join(argv)} exited {done.exit_code}: {done.stderr}"
    return json.loads(done.stdout)


def one_line_error(done: CliRun, exit_code: int) -> str:
    assert done.exit_code == exit_code, f"exit {done.exit_code}, expected {exit_code}: {done.stderr}"
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got: {done.stderr}"
    assert "Traceback" not in done.stderr
    return lines[0]


def _envelope(job_type: str, data: dict[str, Any], *, age: timedelta = timedelta(0)) -> Envelope:
    return Envelope(type=job_type, v=1, id=new_job_id(), created_at=datetime.now(UTC) - age, data=data)


def stale_records(aws: LocalAws, names: list[str]) -> list[str]:
    """Jobs enqueued long ago: the harness dead-letters them as deadline_exceeded without running them."""
    envelopes = [_envelope("record_effect", {"name": name}, age=STALE) for name in names]
    for envelope in envelopes:
        aws.send_raw(envelope.to_json())
    return [envelope.id for envelope in envelopes]


def invalid_records(aws: LocalAws, count: int) -> list[str]:
    """Jobs whose payload breaks the contract (an empty name): dead-lettered as invalid_payload."""
    envelopes = [_envelope("record_effect", {"name": ""}) for _ in range(count)]
    for envelope in envelopes:
        aws.send_raw(envelope.to_json())
    return [envelope.id for envelope in envelopes]


def dlq_entries(tmp_path: Path, *filters: str) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = cli_json(tmp_path, "dlq", "ls", QUEUE, *filters)
    return entries


def wait_for_dlq(aws: LocalAws, count: int) -> None:
    wait_until(lambda: aws.depth(aws.dlq_url).visible == count, f"the DLQ holds {count} entries")


def applied(aws: LocalAws, names: list[str]) -> dict[str, int]:
    effects = aws.effects()
    return {name: effects[record_key(name)].applied if record_key(name) in effects else 0 for name in names}


def test_status_reports_every_field_per_queue(aws: LocalAws, runtime: InProcess, tmp_path: Path) -> None:
    invalid_records(aws, 2)
    wait_for_dlq(aws, 2)
    [status] = cli_json(tmp_path, "status")
    assert status["name"] == QUEUE
    assert status["url"] == aws.queue_url
    assert status["dlq_url"] == aws.dlq_url
    assert status["dlq_visible"] == 2
    assert status["paused"] is False
    assert status["max_concurrency"] == TOPOLOGY.queue(QUEUE).max_concurrency
    assert status["job_types"] == ["slow_charge", "always_fails", "record_effect", "comeback"]
    assert {"visible", "in_flight", "delayed", "oldest_age_s"} <= status.keys()
    table = cli(tmp_path, "status", QUEUE)
    assert table.exit_code == 0
    assert table.stdout.splitlines()[0].split()[:2] == ["QUEUE", "VISIBLE"]


def test_dlq_ls_filters_groups_and_consumes_nothing(aws: LocalAws, runtime: InProcess, tmp_path: Path) -> None:
    stale = stale_records(aws, ["s1", "s2"])
    invalid = invalid_records(aws, 3)
    wait_for_dlq(aws, 5)

    everything = dlq_entries(tmp_path)
    assert {entry["job_id"] for entry in everything} == set(stale + invalid)
    assert {"job_id", "job_type", "reason", "error_class", "error", "attempts", "failed_at"} <= everything[0].keys()
    only_invalid = dlq_entries(tmp_path, "--reason", Reason.INVALID_PAYLOAD)
    assert {entry["job_id"] for entry in only_invalid} == set(invalid)
    assert len(dlq_entries(tmp_path, "--limit", "2")) == 2
    recent = dlq_entries(tmp_path, "--since", "1h", "--reason", Reason.DEADLINE_EXCEEDED)
    assert {entry["job_id"] for entry in recent} == set(stale)
    assert dlq_entries(tmp_path, "--until", "1h") == []
    groups = cli_json(tmp_path, "dlq", "ls", QUEUE, "--group")
    assert {(g["reason"], g["count"]) for g in groups} == {
        (Reason.DEADLINE_EXCEEDED.value, 2),
        (Reason.INVALID_PAYLOAD.value, 3),
    }
    [shown] = cli_json(tmp_path, "dlq", "show", QUEUE, invalid[0])
    assert shown["job_id"] == invalid[0]
    assert shown["envelope"]["data"] == {"name": ""}
    # Listing, grouping and showing consumed nothing: every entry is still there and visible.
    assert aws.depth(aws.dlq_url).visible == 5


def test_dry_run_changes_nothing(aws: LocalAws, runtime: InProcess, tmp_path: Path) -> None:
    stale = stale_records(aws, ["d1", "d2", "d3"])
    wait_for_dlq(aws, 3)
    report = cli_json(tmp_path, "dlq", "redrive", QUEUE, "--dry-run")
    assert (report["dry_run"], report["matched"], report["redriven"]) == (True, 3, 0)
    assert {sample["job_id"] for sample in report["samples"]} == set(stale)
    assert aws.depth(aws.dlq_url).visible == 3
    assert aws.is_empty(aws.queue_url)
    assert applied(aws, ["d1", "d2", "d3"]) == {"d1": 0, "d2": 0, "d3": 0}
    assert cli_json(tmp_path, "audit") == []


def test_filtered_redrive_moves_only_matching_entries(aws: LocalAws, runtime: InProcess, tmp_path: Path) -> None:
    stale = stale_records(aws, ["f1", "f2", "f3"])
    invalid = invalid_records(aws, 2)
    wait_for_dlq(aws, 5)

    report = cli_json(tmp_path, "dlq", "redrive", QUEUE, "--reason", Reason.DEADLINE_EXCEEDED, "--rate", "20/s")
    assert (report["matched"], report["redriven"], report["send_failures"]) == (3, 3, {})
    # Redriven, they run with a fresh max_wall_time, exactly once each.
    wait_until(lambda: applied(aws, ["f1", "f2", "f3"]) == {"f1": 1, "f2": 1, "f3": 1}, "the redriven jobs ran")
    assert {entry["job_id"] for entry in dlq_entries(tmp_path)} == set(invalid)
    assert not set(stale) & {entry["job_id"] for entry in dlq_entries(tmp_path)}
    [row] = cli_json(tmp_path, "audit", QUEUE)
    assert row["action"] == "dlq.redrive"
    assert row["details"]["filters"]["reasons"] == [Reason.DEADLINE_EXCEEDED.value]
    assert (row["details"]["matched"], row["details"]["redriven"]) == (3, 3)
    assert row["actor"]


def test_canary_that_fails_again_stops_the_rest(aws: LocalAws, runtime: InProcess, tmp_path: Path) -> None:
    invalid = invalid_records(aws, 3)
    wait_for_dlq(aws, 3)
    done = cli(tmp_path, "dlq", "redrive", QUEUE, "--canary", "1", "--canary-timeout", "60s", "--json")
    assert done.exit_code == EXIT_INCOMPLETE, done.stderr
    report = json.loads(done.stdout)
    assert report["redriven"] == 1
    assert report["canary"]["failed_again"] == report["canary"]["jobs"]
    assert report["stopped"] == "canary failed again"
    # The canary is back (dead-lettered again) and the two others were never sent.
    assert sorted(entry["job_id"] for entry in dlq_entries(tmp_path)) == sorted(invalid)


def test_canary_of_a_body_that_is_no_envelope_is_seen_failing_again(
    aws: LocalAws, runtime: InProcess, tmp_path: Path
) -> None:
    """Such a body has no job id; the canary recognises its copy back in the DLQ by the body itself."""
    for index in range(2):
        aws.send_raw(f"not json {index}")
    wait_for_dlq(aws, 2)
    done = cli(tmp_path, "dlq", "redrive", QUEUE, "--canary", "1", "--canary-timeout", "60s", "--json")
    assert done.exit_code == EXIT_INCOMPLETE, done.stderr
    report = json.loads(done.stdout)
    assert report["stopped"] == "canary failed again"
    assert report["canary"]["failed_again"] == report["canary"]["jobs"]
    assert report["canary"]["jobs"][0].startswith("message:")


def test_canary_that_completes_lets_the_rest_through(aws: LocalAws, runtime: InProcess, tmp_path: Path) -> None:
    names = ["c1", "c2", "c3", "c4"]
    stale_records(aws, names)
    wait_for_dlq(aws, 4)
    report = cli_json(tmp_path, "dlq", "redrive", QUEUE, "--canary", "2", "--canary-timeout", "60s")
    assert report["canary"]["completed"] == report["canary"]["jobs"]
    assert len(report["canary"]["jobs"]) == 2
    assert report["redriven"] == 4
    wait_until(lambda: set(applied(aws, names).values()) == {1}, "every redriven job ran once")
    assert aws.depth(aws.dlq_url).visible == 0


class _InterruptedAfterSend:
    """An SQS client on which the process dies between a send and the DLQ delete, once."""

    def __init__(self, sqs: Any, sends_before_interrupt: int) -> None:
        self._sqs = sqs
        self._left = sends_before_interrupt
        self.sent = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sqs, name)

    def send_message(self, **request: Any) -> Any:
        response = self._sqs.send_message(**request)
        self.sent += 1
        return response

    def delete_message(self, **request: Any) -> Any:
        if self.sent >= self._left:
            raise KeyboardInterrupt
        return self._sqs.delete_message(**request)


def test_interrupted_redrive_run_again_duplicates_nothing(aws: LocalAws, runtime: InProcess, tmp_path: Path) -> None:
    names = ["i1", "i2", "i3", "i4", "i5"]
    stale_records(aws, names)
    wait_for_dlq(aws, 5)
    target = local_target(TOPOLOGY, Clients())
    interrupted = _InterruptedAfterSend(aws.sqs, sends_before_interrupt=3)
    redrive = Redrive(
        sqs=interrupted,
        topology=TOPOLOGY,
        queue=target.queue(QUEUE),
        runners=lambda job_type: target.idempotency(TOPOLOGY, job_type),
        rate=RateLimiter(None),
    )
    with pytest.raises(KeyboardInterrupt):
        redrive.run(redrive.report(DlqFilter(), dry_run=False), DlqFilter(), limit=None, canary=0)
    # The third entry was sent but its DLQ copy not deleted: both copies exist now.
    assert interrupted.sent == 3
    wait_until(lambda: aws.depth(aws.dlq_url).visible == 3, "the interrupted run handed its entries back")

    report = cli_json(tmp_path, "dlq", "redrive", QUEUE)
    assert report["redriven"] == 3
    wait_until(lambda: set(applied(aws, names).values()) == {1}, "every job ran")
    wait_until(lambda: aws.is_empty(aws.queue_url), "the queue is empty")
    assert applied(aws, names) == dict.fromkeys(names, 1)
    assert aws.depth(aws.dlq_url).visible == 0


def test_discard_needs_yes_and_deletes_only_matching(aws: LocalAws, runtime: InProcess, tmp_path: Path) -> None:
    stale = stale_records(aws, ["x1"])
    invalid_records(aws, 2)
    wait_for_dlq(aws, 3)
    refused = cli(tmp_path, "dlq", "discard", QUEUE, "--reason", Reason.INVALID_PAYLOAD)
    assert "--yes" in one_line_error(refused, EXIT_USAGE)
    assert aws.depth(aws.dlq_url).visible == 3
    result = cli_json(tmp_path, "dlq", "discard", QUEUE, "--reason", Reason.INVALID_PAYLOAD, "--yes")
    assert result["deleted"] == 2
    assert [entry["job_id"] for entry in dlq_entries(tmp_path)] == stale
    [row] = cli_json(tmp_path, "audit")
    assert (row["action"], row["details"]["deleted"]) == ("dlq.discard", 2)


def test_pause_stops_consumption_and_resume_restarts_it(aws: LocalAws, runtime: InProcess, tmp_path: Path) -> None:
    paused = cli_json(tmp_path, "pause", QUEUE, "--reason", "deploying")
    assert paused["paused"] is True
    wait_until(lambda: runtime.runtime.pollers[QUEUE].paused, "the poller saw the pause")
    names = ["p1", "p2", "p3"]
    aws.enqueue_many(
        [
            __import__("conveyor.sdk.client", fromlist=["JobRequest"]).JobRequest("record_effect", {"name": n})
            for n in names
        ]
    )
    wait_until(lambda: aws.depth(aws.queue_url).visible == 3, "the jobs are in the queue")
    time.sleep(PAUSE_OBSERVATION_S)
    assert aws.depth(aws.queue_url).visible == 3
    assert applied(aws, names) == dict.fromkeys(names, 0)
    [status] = cli_json(tmp_path, "status", QUEUE)
    assert status["paused"] is True

    assert cli_json(tmp_path, "resume", QUEUE)["paused"] is False
    wait_until(lambda: applied(aws, names) == dict.fromkeys(names, 1), "the jobs ran after resume")
    actions = [row["action"] for row in cli_json(tmp_path, "audit", QUEUE)]
    assert actions == ["resume", "pause"]


def test_timed_pause_resumes_by_itself(aws: LocalAws, runtime: InProcess, tmp_path: Path) -> None:
    paused = cli_json(tmp_path, "pause", QUEUE, "--reason", "short", "--for", "3s")
    assert paused["paused"] is True
    assert paused["resume_at"] is not None
    wait_until(lambda: runtime.runtime.pollers[QUEUE].paused, "the poller stopped receiving")
    names = ["t1", "t2"]
    aws.enqueue_many([JobRequest("record_effect", {"name": name}) for name in names])
    # Nobody resumes it: the jobs still run once the pause has run out.
    wait_until(lambda: applied(aws, names) == dict.fromkeys(names, 1), "the jobs ran after the timed pause")
    [status] = cli_json(tmp_path, "status", QUEUE)
    assert (status["paused"], status["resume_at"]) == (False, None)
    # The resume wrote its own row, once, naming the pause it ended.
    resumed, pause = cli_json(tmp_path, "audit")
    assert (resumed["action"], resumed["actor"], pause["action"]) == ("resume", "conveyor:timed-resume", "pause")
    assert resumed["details"] == {
        "ends_pause": {
            "resume_at": paused["resume_at"],
            "reason": "short",
            "paused_at": resumed["details"]["ends_pause"]["paused_at"],
        }
    }


def test_concurrency_is_set_bounded_and_audited(aws: LocalAws, runtime: InProcess, tmp_path: Path) -> None:
    assert cli_json(tmp_path, "concurrency", QUEUE, "4")["max_concurrency"] == 4
    wait_until(lambda: runtime.runtime.pollers[QUEUE].concurrency == 4, "the poller took the new concurrency")
    for wrong in ("1", "1001"):
        assert "between 2 and 1000" in one_line_error(cli(tmp_path, "concurrency", QUEUE, wrong), EXIT_USAGE)
    [row] = cli_json(tmp_path, "audit")
    assert (row["action"], row["details"]) == ("concurrency", {"from": 2, "to": 4})


def test_concurrency_set_by_hand_says_a_deploy_may_restore_the_declared_value(
    aws: LocalAws, runtime: InProcess, tmp_path: Path
) -> None:
    declared = TOPOLOGY.queue(QUEUE).max_concurrency
    done = cli(tmp_path, "concurrency", QUEUE, "4")
    assert done.exit_code == 0, done.stderr
    assert f"declares max_concurrency={declared}: a deploy that updates its event source mapping sets it back" in (
        done.stderr
    )
    [status] = cli_json(tmp_path, "status", QUEUE)
    assert (status["max_concurrency"], status["declared_max_concurrency"]) == (4, declared)
    assert f"4 (declared {declared})" in cli(tmp_path, "status", QUEUE).stdout
    # Back at the declared value: nothing to warn about, nothing beside it in the table.
    back = cli(tmp_path, "concurrency", QUEUE, str(declared))
    assert back.exit_code == 0
    assert "declares" not in back.stderr
    assert "declared" not in cli(tmp_path, "status", QUEUE).stdout


def test_drain_pauses_and_reports_nothing_in_flight(aws: LocalAws, runtime: InProcess, tmp_path: Path) -> None:
    report = cli_json(tmp_path, "drain", QUEUE, "--timeout", "30s")
    assert (report["paused"], report["drained"], report["in_flight"]) == (True, True, 0)
    assert cli_json(tmp_path, "status", QUEUE)[0]["paused"] is True


def test_drain_that_times_out_says_what_is_still_in_flight(aws: LocalAws, runtime: InProcess, tmp_path: Path) -> None:
    cli_json(tmp_path, "pause", QUEUE, "--reason", "hold one message")
    wait_until(lambda: runtime.runtime.pollers[QUEUE].paused, "the poller stopped receiving")
    aws.enqueue_many([JobRequest("record_effect", {"name": "held"})])
    # A worker that is still busy with it: the message stays in flight past the drain's timeout.
    held = aws.sqs.receive_message(QueueUrl=aws.queue_url, WaitTimeSeconds=5, VisibilityTimeout=120)["Messages"]
    assert len(held) == 1
    done = cli(tmp_path, "drain", QUEUE, "--timeout", "3s", "--json")
    assert done.exit_code == EXIT_INCOMPLETE, done.stderr
    assert (json.loads(done.stdout)["drained"], json.loads(done.stdout)["in_flight"]) == (False, 1)
    assert "still in flight" in done.stderr
    row = cli_json(tmp_path, "audit")[0]
    assert (row["action"], row["details"]["drained"]) == ("drain", False)


def test_bad_input_is_one_line_with_a_specific_exit_code(aws: LocalAws, tmp_path: Path) -> None:
    assert "unknown queue 'nope'" in one_line_error(cli(tmp_path, "status", "nope"), EXIT_NOT_FOUND)
    assert "unknown reason" in one_line_error(cli(tmp_path, "dlq", "ls", QUEUE, "--reason", "bogus"), EXIT_USAGE)
    assert "does not run on queue" in one_line_error(
        cli(tmp_path, "dlq", "ls", QUEUE, "--type", "send_welcome_email"), EXIT_NOT_FOUND
    )
    assert "time stamp" in one_line_error(cli(tmp_path, "dlq", "ls", QUEUE, "--since", "yesterday"), EXIT_USAGE)
    assert "rate" in one_line_error(cli(tmp_path, "dlq", "redrive", QUEUE, "--rate", "fast"), EXIT_USAGE)
    assert "no entry" in one_line_error(cli(tmp_path, "dlq", "show", QUEUE, "missing"), EXIT_NOT_FOUND)


def test_unreachable_endpoint_is_one_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{free_port()}")
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    assert "cannot reach" in one_line_error(cli(tmp_path, "status"), EXIT_UNREACHABLE)


def test_missing_credentials_is_one_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Against AWS (no endpoint set) with no credentials anywhere: the SDK fails before any request leaves."""
    for name in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    assert "no AWS credentials" in one_line_error(cli(tmp_path, "status"), EXIT_NO_CREDENTIALS)


def test_interrupted_redrive_is_still_audited_with_what_it_did(
    aws: LocalAws, runtime: InProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stale_records(aws, ["a1", "a2", "a3"])
    wait_for_dlq(aws, 3)
    sends: list[str] = []
    send = Redrive._send

    def interrupted_after_one(self: Redrive, entry: Any, redrive_id: str) -> None:
        if sends:
            raise KeyboardInterrupt
        sends.append(entry.message_id)
        send(self, entry, redrive_id)

    with monkeypatch.context() as patched:
        patched.setattr(Redrive, "_send", interrupted_after_one)
        with pytest.raises(SystemExit) as exited:
            main(["--topology", TOPOLOGY_SPEC, "dlq", "redrive", QUEUE])
    assert exited.value.code == EXIT_ABORTED
    [row] = cli_json(tmp_path, "audit")
    assert (row["action"], row["details"]["redriven"], row["details"]["interrupted"]) == ("dlq.redrive", 1, True)
    wait_until(lambda: aws.depth(aws.dlq_url).visible == 2, "the interrupted run handed back what it did not send")


BACKFILL_LINES = 30


def test_backfill_killed_midway_resumes_and_runs_every_line_once(
    aws: LocalAws, runtime: InProcess, tmp_path: Path
) -> None:
    names = [f"b{index:02d}" for index in range(BACKFILL_LINES)]
    source = tmp_path / "names.jsonl"
    source.write_text("".join(json.dumps({"name": name}) + "\n" for name in names))
    checkpoint = Path(f"{source}.checkpoint")
    command = [str(JOBS), "--topology", TOPOLOGY_SPEC, "backfill", "record_effect", "--from", str(source)]
    with subprocess.Popen([*command, "--rate", "10/s", "--json"], env=child_environment(), cwd=tmp_path) as first:
        wait_until(
            lambda: checkpoint.exists() and json.loads(checkpoint.read_text())["lines_done"] >= BACKFILL_LINES // 3,
            "the first run checkpointed a third of the file",
        )
        first.kill()  # SIGKILL: no cleanup, as when a laptop dies mid-backfill
    assert first.returncode == -signal.SIGKILL

    summary = cli_json(tmp_path, "backfill", "record_effect", "--from", str(source))
    assert summary["complete"] is True
    assert summary["skipped_already_done"] >= BACKFILL_LINES // 3
    assert summary["sent"] + summary["skipped_already_done"] == BACKFILL_LINES
    wait_until(lambda: set(applied(aws, names).values()) == {1}, "every line's job ran")
    assert applied(aws, names) == dict.fromkeys(names, 1)
    again = cli_json(tmp_path, "backfill", "record_effect", "--from", str(source))
    assert (again["sent"], again["complete"]) == (0, True)
