"""Logs: every line of a job carries its correlation; sensitive payload values never appear."""

import io
import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from pydantic import Field

from conveyor.contract.declarations import Queue
from conveyor.contract.errors import PermanentError, RetryableError
from conveyor.contract.job_context import JobContext
from conveyor.contract.payloads import Payload, sensitive
from conveyor.contract.topology import Topology
from conveyor.sdk.jobs import job
from tests.aws import moto_aws
from tests.harness_support import FIXED_NOW, QueueDriver

SECRET = "tok_live_4242"


class Signup(Payload):
    user_id: str
    email: str = sensitive()
    outcome: str = Field(default="ok")


@job("welcome_signup", queue="logs", model=Signup)
def welcome_signup(payload: Signup, ctx: JobContext) -> None:
    ctx.logger.info("looking up user", extra={"user_id": payload.user_id})
    ctx.logger.info("sending")
    if payload.outcome == "retry":
        raise RetryableError(f"provider refused {payload.email} with token {SECRET}")
    if payload.outcome == "fail":
        raise PermanentError(f"address {payload.email} bounced")


TOPOLOGY = Topology(queues=(Queue("logs", age_objective=timedelta(minutes=1)),), job_types=(welcome_signup,))
CORRELATION = {"request_id": "req-9", "origin": "signup-form", "actor": "user-1"}


@pytest.fixture
def driver() -> Iterator[QueueDriver]:
    for aws in moto_aws(TOPOLOGY):
        yield QueueDriver(aws, "logs")


def body(outcome: str, job_id: str) -> str:
    return json.dumps(
        {
            "type": "welcome_signup",
            "v": 1,
            "id": job_id,
            "created_at": (FIXED_NOW - timedelta(seconds=5)).isoformat(),
            "correlation": CORRELATION,
            "data": {"user_id": "u-1", "email": "ann@example.com", "outcome": outcome},
        }
    )


def log_lines(logs: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in logs.getvalue().splitlines()]


@pytest.mark.parametrize("outcome", ["ok", "retry", "fail"])
def test_every_line_of_a_job_carries_its_correlation(driver: QueueDriver, logs: io.StringIO, outcome: str) -> None:
    driver.send(body(outcome, f"job-{outcome}"))
    driver.run(*driver.receive())
    lines = log_lines(logs)
    assert len(lines) >= 3  # the handler's two, and the harness's outcome line
    for line in lines:
        assert line["job_id"] == f"job-{outcome}"
        assert line["job_type"] == "welcome_signup"
        assert line["attempt"] == 1
        assert {key: line[key] for key in CORRELATION} == CORRELATION


@pytest.mark.parametrize("outcome", ["retry", "fail"])
def test_sensitive_values_never_reach_the_logs(
    driver: QueueDriver, logs: io.StringIO, capsys: pytest.CaptureFixture[str], outcome: str
) -> None:
    driver.send(body(outcome, f"job-{outcome}"))
    driver.run(*driver.receive())
    output = logs.getvalue() + capsys.readouterr().out
    assert "ann@example.com" not in output
    assert "***" in logs.getvalue()


def test_a_successful_job_logs_one_line_of_its_own(driver: QueueDriver, logs: io.StringIO) -> None:
    """The harness adds one line per successful job; the rest is the job's own logging."""
    driver.send(body("ok", "job-quiet"))
    driver.run(*driver.receive())
    own = {"looking up user", "sending"}
    harness_lines = [line for line in log_lines(logs) if line["message"] not in own]
    assert [line["message"] for line in harness_lines] == ["job succeeded"]


@pytest.mark.parametrize(
    ("outcome", "event"),
    [
        ("ok", {"outcome": "succeeded", "level": "INFO"}),
        ("retry", {"outcome": "retried", "level": "WARNING", "reason": "retryable_error"}),
        ("fail", {"outcome": "dead_lettered", "level": "ERROR", "reason": "permanent_error"}),
    ],
)
def test_each_run_logs_one_job_event_with_its_outcome_and_duration(
    driver: QueueDriver, logs: io.StringIO, outcome: str, event: dict[str, str]
) -> None:
    """The line `conveyor tail` follows and the local console shows (docs/observability.md#logs)."""
    driver.send(body(outcome, f"job-{outcome}"))
    driver.run(*driver.receive())
    (line,) = [line for line in log_lines(logs) if "outcome" in line]
    assert {key: line[key] for key in event} == event
    assert (line["queue"], line["job_type"], line["job_id"], line["attempt"]) == (
        "logs",
        "welcome_signup",
        f"job-{outcome}",
        1,
    )
    assert line["duration_ms"] == 0.0  # the driver's clock stands still while the handler runs
    if outcome != "ok":
        assert line["exception"].startswith('Traceback (most recent call last):\n  File "' + __file__)
        assert "ann@example.com" not in line["exception"]
        assert "***" in line["exception"]
