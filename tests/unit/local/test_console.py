"""The local console: the harness's real JSON log lines, one readable line per job event.

Every line rendered here was logged by the real harness (a QueueDriver on moto) for a job that
succeeded, retried, dead-lettered, was absorbed as a duplicate, snoozed or discarded; none is typed by hand.
"""

import io
import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from rich.console import Console

from conveyor import Discard, job
from conveyor.contract.declarations import Queue
from conveyor.contract.errors import PermanentError, RetryableError, Snooze
from conveyor.contract.job_context import JobContext
from conveyor.contract.payloads import Payload, sensitive
from conveyor.contract.topology import Topology
from conveyor.local.console import JobEvent, JsonConsole, PrettyConsole, log_record, resolve_log_format
from tests.aws import moto_aws
from tests.harness_support import FIXED_NOW, QueueDriver, envelope

SECRET = "ann@example.com"


class Step(Payload):
    outcome: str
    email: str = sensitive()


@job("console_step", queue="console", model=Step)
def console_step(payload: Step, ctx: JobContext) -> None:
    ctx.logger.info("working")
    if payload.outcome == "retry":
        raise RetryableError(f"provider refused {payload.email}")
    if payload.outcome == "fail":
        raise PermanentError(f"address {payload.email} bounced")
    if payload.outcome == "snooze":
        raise Snooze(timedelta(seconds=30))
    if payload.outcome == "discard":
        raise Discard(f"{payload.email} unsubscribed")


TOPOLOGY = Topology(queues=(Queue("console", age_objective=timedelta(minutes=1)),), job_types=(console_step,))


@pytest.fixture
def driver() -> Iterator[QueueDriver]:
    for aws in moto_aws(TOPOLOGY):
        yield QueueDriver(aws, "console")


def run(driver: QueueDriver, logs: io.StringIO, outcome: str, job_id: str) -> list[str]:
    """The harness's log lines for one job run through the real worker."""
    start = len(logs.getvalue())
    data = {"outcome": outcome, "email": SECRET}
    driver.send(envelope("console_step", data, job_id=job_id, created_at=FIXED_NOW))
    driver.run(*driver.receive())
    return logs.getvalue()[start:].splitlines()


def events(lines: list[str]) -> list[JobEvent]:
    return [event for line in lines if (record := log_record(line)) and (event := JobEvent.of(record))]


def plain(lines: list[str]) -> str:
    """What PrettyConsole prints for ``lines``, without colour."""
    out = io.StringIO()
    pretty = PrettyConsole(Console(file=out, force_terminal=False, width=200))
    for line in lines:
        pretty.write(line + "\n")
    return out.getvalue()


def test_each_run_logs_exactly_one_job_event_with_its_fields(driver: QueueDriver, logs: io.StringIO) -> None:
    (succeeded,) = events(run(driver, logs, "ok", "job-ok-0001"))
    assert (succeeded.outcome, succeeded.queue, succeeded.job_type, succeeded.job_id, succeeded.attempt) == (
        "succeeded",
        "console",
        "console_step",
        "job-ok-0001",
        1,
    )
    assert succeeded.duration_ms == 0.0  # the driver's clock stands still
    assert succeeded.time is not None
    (retried,) = events(run(driver, logs, "retry", "job-retry-01"))
    assert (retried.outcome, retried.reason, retried.error_class) == ("retried", "retryable_error", "RetryableError")
    assert retried.delay_s is not None
    assert retried.delay_s > 0
    (dead,) = events(run(driver, logs, "fail", "job-fail-001"))
    assert (dead.outcome, dead.reason, dead.error_class) == ("dead_lettered", "permanent_error", "PermanentError")
    (snoozed,) = events(run(driver, logs, "snooze", "job-snooze-1"))
    assert (snoozed.outcome, snoozed.delay_s) == ("snoozed", 30.0)


def test_a_job_event_is_one_line_with_time_queue_type_id_outcome_and_duration(
    driver: QueueDriver, logs: io.StringIO
) -> None:
    lines = run(driver, logs, "ok", "3f2a9c1e-aaaa-bbbb")
    shown = plain(lines).splitlines()
    # The job's own "working" line, then its event.
    assert len(shown) == 2
    assert "INFO" in shown[0]
    assert "working" in shown[0]
    assert "(job 3f2a9c1e)" in shown[0]
    event = shown[1].split()
    assert event[1:6] == ["console", "console_step", "3f2a9c1e", "succeeded", "0.0ms"]
    assert len(event[0]) == len("12:00:00.000")


def test_a_retry_shows_reason_error_and_backoff_then_the_masked_traceback(
    driver: QueueDriver, logs: io.StringIO
) -> None:
    shown = plain(run(driver, logs, "retry", "job-retry-02"))
    event_line = next(line for line in shown.splitlines() if " retried " in line)
    # The trace starts at the job's own code: the harness and Powertools frames before it are the same for every job.
    assert shown.split("Traceback (most recent call last):\n", 1)[1].startswith(f'  File "{__file__}"')
    assert "attempt 1  retryable_error  RetryableError: provider refused ***" in event_line
    assert "(again in " in event_line
    assert "Traceback (most recent call last):" in shown
    assert 'raise RetryableError(f"provider refused {payload.email}")' in shown
    assert SECRET not in shown


def test_a_dead_letter_shows_its_reason(driver: QueueDriver, logs: io.StringIO) -> None:
    shown = plain(run(driver, logs, "fail", "job-fail-002"))
    assert "dead-lettered" in shown
    assert "permanent_error  PermanentError: address *** bounced" in shown
    assert "PermanentError: address *** bounced" in shown.split("Traceback", 1)[1]


def test_an_unreadable_message_is_an_event_without_a_type(driver: QueueDriver, logs: io.StringIO) -> None:
    start = len(logs.getvalue())
    driver.send("not an envelope")
    driver.run(*driver.receive())
    lines = logs.getvalue()[start:].splitlines()
    (event,) = events(lines)
    assert (event.outcome, event.job_type, event.job_id, event.reason) == (
        "dead_lettered",
        None,
        None,
        "invalid_json",
    )
    assert "<unreadable>" in plain(lines)
    assert "Traceback" not in plain(lines)  # no handler ran: nothing to trace


def test_a_duplicate_is_shown_as_one(driver: QueueDriver, logs: io.StringIO) -> None:
    run(driver, logs, "ok", "job-twice-01")
    (event,) = events(run(driver, logs, "ok", "job-twice-01"))
    assert event.outcome == "duplicate"
    assert " duplicate " in plain([line for line in logs.getvalue().splitlines() if "duplicate" in line])


def test_a_discard_shows_its_masked_reason_and_no_traceback(driver: QueueDriver, logs: io.StringIO) -> None:
    lines = run(driver, logs, "discard", "job-drop-001")
    (event,) = events(lines)
    assert (event.outcome, event.reason, event.error) == ("discarded", "*** unsubscribed", None)
    event_line = plain(lines).splitlines()[-1]
    assert event_line.split()[1:6] == ["console", "console_step", "job-drop", "discarded", "0.0ms"]
    assert event_line.endswith("*** unsubscribed")
    assert SECRET not in plain(lines)
    assert "Traceback" not in plain(lines)


def test_lines_that_are_not_json_pass_through_unchanged() -> None:
    assert plain(["print from a job", "{not json"]) == "print from a job\n{not json\n"


def test_on_a_terminal_the_outcome_is_coloured(driver: QueueDriver, logs: io.StringIO) -> None:
    out = io.StringIO()
    pretty = PrettyConsole(Console(file=out, force_terminal=True, color_system="standard", width=200))
    for line in run(driver, logs, "fail", "job-colour-1"):
        pretty.write(line + "\n")
    assert "\x1b[" in out.getvalue()


class _Stream(io.StringIO):
    def __init__(self, tty: bool) -> None:
        super().__init__()
        self._tty = tty

    def isatty(self) -> bool:
        return self._tty


@pytest.mark.parametrize(
    ("requested", "tty", "chosen"),
    [("auto", True, "pretty"), ("auto", False, "json"), ("json", True, "json"), ("pretty", False, "pretty")],
)
def test_auto_is_pretty_on_a_terminal_only(requested: str, tty: bool, chosen: str) -> None:
    assert resolve_log_format(requested, _Stream(tty)) == chosen


def test_records_round_trip_as_json(driver: QueueDriver, logs: io.StringIO) -> None:
    """What the console reads is what Powertools wrote: every harness line is one JSON object."""
    for line in run(driver, logs, "retry", "job-json-001"):
        record: Any = json.loads(line)
        assert isinstance(record, dict)


def test_emf_documents_never_reach_the_console_in_either_format(
    driver: QueueDriver, logs: io.StringIO, capsys: pytest.CaptureFixture[str]
) -> None:
    log_lines = run(driver, logs, "ok", "job-emf-0001")
    emf_lines = [line for line in capsys.readouterr().out.splitlines() if '"_aws"' in line]
    assert emf_lines, "the worker wrote its metrics as EMF"
    lines = [*log_lines, *emf_lines]
    as_json = io.StringIO()
    JsonConsole(as_json).write("".join(line + "\n" for line in lines))
    assert as_json.getvalue().splitlines() == log_lines
    assert "_aws" not in plain(lines)
    assert len(plain(lines).splitlines()) == len(log_lines)
