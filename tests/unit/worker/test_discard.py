"""Discard on purpose: a handler's ``raise Discard(reason)`` ends its job as discarded, final and not a failure.

Real SQS messages on moto run through ``Worker(Harness(...)).handle``. Assertions are on what an
operator sees: the partial batch response, what was re-sent or hidden for backoff, the DLQ, the
job event in the logs, the EMF lines and `conveyor stats` read back from CloudWatch, a breaker's
state, and the run audit of a scheduled job.
"""

import io
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest

from conveyor import Discard
from conveyor.contract.declarations import Queue, RetryPolicy
from conveyor.contract.destinations import Breaker, Destination
from conveyor.contract.errors import RetryableError
from conveyor.contract.job_context import JobContext
from conveyor.contract.payloads import MASK, Payload, sensitive
from conveyor.contract.schedule_inputs import render_input, schedule_input
from conveyor.contract.schedules import Schedule
from conveyor.contract.topology import Topology
from conveyor.local.emf import emf_document, metric_data
from conveyor.ops.stats import read_stats, render_stats
from conveyor.sdk.jobs import job
from conveyor.worker.destinations.breaker import Breakers, BreakerState
from conveyor.worker.metrics import DISCARDED
from conveyor.worker.outcomes import Kind
from conveyor.worker.schedule_runs import RunStatus, ScheduleRuns
from tests.aws import Aws
from tests.harness_support import QueueDriver, envelope, requests_to, schedule_succeeded_counts

CARD = "4242-4242-4242-4242"
RUNS: list[str] = []
RETRY = RetryPolicy(max_attempts=3, base=timedelta(seconds=1), cap=timedelta(seconds=10))
COOL_DOWN = timedelta(seconds=30)


class Order(Payload):
    order_id: str
    card: str = sensitive()
    cancelled: bool = True
    fail: bool = False
    reason: str = "order {order_id} cancelled; card {card} not charged"


def _decide(payload: Order) -> None:
    """The order service: cancelled orders are dropped with a reason quoting the card, as careless code does."""
    RUNS.append(payload.order_id)
    if payload.fail:
        raise RetryableError("gateway unavailable")
    if payload.cancelled:
        raise Discard(payload.reason.format(order_id=payload.order_id, card=payload.card))


@job("fulfil", queue="work", model=Order, retry=RETRY)
def fulfil(payload: Order, ctx: JobContext) -> None:
    _decide(payload)


# retry_on=(Exception,) would classify a Discard as retryable, hence a service failure: the guard must not count it.
@job("charge", queue="work", model=Order, retry=RETRY, retry_on=(Exception,))
def charge(payload: Order, ctx: JobContext) -> None:
    ctx.call("gateway", lambda: _decide(payload))


@job("charge_declared", queue="work", model=Order, retry=RETRY, retry_on=(Exception,), destinations=("gateway",))
def charge_declared(payload: Order, ctx: JobContext) -> None:
    _decide(payload)


class Sweep(Payload):
    token: str = sensitive()
    chunks: int = 0  # continue_later this many times before discarding


@job("sweep", queue="work", model=Sweep)
def sweep(payload: Sweep, ctx: JobContext) -> None:
    RUNS.append(ctx.job_id)
    done = int((ctx.resume_state() or {}).get("done", 0))
    if done < payload.chunks:
        ctx.continue_later({"done": done + 1})
    raise Discard(f"nothing to sweep with {payload.token}")


NIGHTLY = Schedule("nightly-sweep", "cron(0 2 * * ? *)", job="sweep", payload={"token": "tok_nightly"})
CHUNKED = Schedule("chunked-sweep", "cron(0 3 * * ? *)", job="sweep", payload={"token": "tok_nightly", "chunks": 1})
TOPOLOGY = Topology(
    queues=(Queue("work", age_objective=timedelta(minutes=5), function_timeout=timedelta(seconds=10)),),
    job_types=(fulfil, charge, charge_declared, sweep),
    destinations=(
        Destination(
            "gateway",
            breaker=Breaker(failures=1, window=timedelta(minutes=1), cool_down=COOL_DOWN),
            max_wait=timedelta(0),
        ),
    ),
    schedules=(NIGHTLY, CHUNKED),
)


@pytest.fixture
def topology() -> Topology:
    return TOPOLOGY


@pytest.fixture(autouse=True)
def runs() -> Iterator[list[str]]:
    RUNS.clear()
    yield RUNS
    RUNS.clear()


@pytest.fixture
def work(aws: Aws) -> QueueDriver:
    return QueueDriver(aws, "work")


def order(job_type: str, order_id: str, *, job_id: str | None = None, **data: Any) -> str:
    return envelope(job_type, {"order_id": order_id, "card": CARD, **data}, job_id=job_id)


def job_events(logs: io.StringIO) -> list[dict[str, Any]]:
    return [record for line in logs.getvalue().splitlines() if "outcome" in (record := json.loads(line))]


def breaker_state(aws: Aws) -> BreakerState:
    return Breakers(aws.dynamodb, aws.provisioned.limits_table).read("gateway").state


# --- the exception -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "error", "message"),
    [
        ((), TypeError, "missing 1 required positional argument: 'reason'"),
        (("",), ValueError, "the reason must say why the job is dropped"),
        (("   ",), ValueError, "the reason must say why the job is dropped"),
        ((None,), TypeError, "the reason must be text saying why, not NoneType"),
        ((404,), TypeError, "the reason must be text saying why, not int"),
    ],
)
def test_a_discard_without_a_reason_is_refused_when_raised(
    args: tuple[Any, ...], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        raise Discard(*args)


def test_a_discard_keeps_its_reason() -> None:
    discard = Discard("order cancelled")
    assert (discard.reason, str(discard)) == ("order cancelled", "order cancelled")


# --- through the harness ---------------------------------------------------------------------------


def test_a_discarded_job_is_acked_once_not_retried_nor_dead_lettered_and_logged_with_its_reason_masked(
    work: QueueDriver, runs: list[str], logs: io.StringIO
) -> None:
    work.send(order("fulfil", "o-1", job_id="job-cancelled"))
    with (
        requests_to(work.aws.sqs, "SendMessage") as resent,
        requests_to(work.aws.sqs, "ChangeMessageVisibility") as backoffs,
    ):
        assert work.run(work.receive_one()) == []  # acknowledged: Lambda deletes it

    assert runs == ["o-1"]
    assert (resent, backoffs) == ([], [])  # no copy re-sent for later, no backoff set
    assert work.dead_letters() == []
    assert work.receive() == []
    expected = f"order o-1 cancelled; card {MASK} not charged"
    [outcome] = work.outcomes
    assert (outcome.kind, outcome.reason, outcome.error_class) == (Kind.DISCARDED, expected, None)
    [event] = job_events(logs)
    assert {key: event[key] for key in ("message", "level", "outcome", "reason", "job_id", "job_type")} == {
        "message": "job discarded",
        "level": "INFO",
        "outcome": "discarded",
        "reason": expected,
        "job_id": "job-cancelled",
        "job_type": "fulfil",
    }
    assert not {"error", "error_class", "exception"} & set(event)  # not an error: no traceback
    assert CARD not in logs.getvalue()


def test_a_duplicate_of_a_discarded_job_is_absorbed_without_running_and_says_it_was_discarded(
    work: QueueDriver, runs: list[str], logs: io.StringIO
) -> None:
    body = order("fulfil", "o-2", job_id="job-twice")
    work.send(body)
    assert work.run(work.receive_one()) == []
    # A redelivery (or a producer's second send) of the same job, after the first was discarded.
    work.send(body)
    assert work.run(work.receive_one()) == []

    assert runs == ["o-2"]
    assert [outcome.kind for outcome in work.outcomes] == [Kind.DISCARDED, Kind.DUPLICATE]
    first, second = job_events(logs)
    assert second["message"] == "job duplicate absorbed; its run was discarded"
    assert second["reason"] == first["reason"] == f"order o-2 cancelled; card {MASK} not charged"


def test_a_job_that_raises_a_discard_without_a_reason_is_retried_as_its_own_bug(
    work: QueueDriver, runs: list[str]
) -> None:
    work.send(order("fulfil", "o-3", reason=" "))
    assert len(work.run(work.receive_one())) == 1  # a batch item failure: the retry is scheduled
    [outcome] = work.outcomes
    assert (outcome.kind, outcome.reason, outcome.error_class) == (Kind.RETRIED, "unexpected", "ValueError")


def test_a_discard_writes_the_discarded_count_without_a_reason_dimension(
    work: QueueDriver, capsys: pytest.CaptureFixture[str]
) -> None:
    work.send(order("fulfil", "o-4"))
    work.send(order("fulfil", "o-5", cancelled=False))
    capsys.readouterr()
    work.run(*work.receive())
    documents = [document for line in capsys.readouterr().out.splitlines() if (document := emf_document(line))]
    discarded = [document for document in documents if DISCARDED in document]
    [document] = discarded
    assert document[DISCARDED] == [1.0]
    assert document["_aws"]["CloudWatchMetrics"][0]["Dimensions"] == [["queue", "job_type"]]
    assert (document["queue"], document["job_type"]) == ("work", "fulfil")


def test_conveyor_stats_counts_discarded_jobs_per_job_type(
    work: QueueDriver, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    for index in range(3):
        work.send(order("fulfil", f"o-{index}", cancelled=index < 2))
    capsys.readouterr()
    work.run(*work.receive())
    # What CloudWatch Logs does with the EMF lines in AWS, and the local runtime's forwarder does locally.
    cloudwatch = boto3.client("cloudwatch")
    for line in capsys.readouterr().out.splitlines():
        if document := emf_document(line):
            namespace, entries = metric_data(document)
            cloudwatch.put_metric_data(Namespace=namespace, MetricData=entries)

    now = datetime.now(UTC)
    # Percentiles from raw values, as locally: in-process moto cannot answer a percentile query.
    start, end = now - timedelta(minutes=10), now + timedelta(minutes=1)
    stats = read_stats(cloudwatch, TOPOLOGY, start=start, end=end, raw_values=tmp_path / "metrics.jsonl")
    [fulfilled] = [entry for entry in stats if entry.job_type == "fulfil"]
    assert (fulfilled.counts[DISCARDED], fulfilled.counts["Succeeded"]) == (2, 1)
    header, *rows = render_stats([fulfilled]).splitlines()
    column = header.split().index("DISCARDED") - 1  # "JOB TYPE" is two words in the header, one cell in a row
    assert rows[0].split()[column] == "2"


# --- destinations: a discard is not the service failing ------------------------------------------------


def test_discards_inside_ctx_call_never_open_the_breaker_even_when_retry_on_would_retry_them(
    work: QueueDriver, aws: Aws, runs: list[str]
) -> None:
    for index in range(3):  # the breaker opens on one failure
        work.send(order("charge", f"o-{index}"))
        assert work.run(work.receive_one()) == []
    assert runs == ["o-0", "o-1", "o-2"]
    assert [outcome.kind for outcome in work.outcomes] == [Kind.DISCARDED] * 3
    assert breaker_state(aws) is BreakerState.CLOSED


def test_a_discarding_half_open_probe_closes_the_breaker(work: QueueDriver, aws: Aws, runs: list[str]) -> None:
    work.send(order("charge", "fails", fail=True))
    assert len(work.run(work.receive_one())) == 1
    assert breaker_state(aws) is BreakerState.OPEN

    work.now += COOL_DOWN + timedelta(seconds=1)
    work.send(order("charge_declared", "probe"))
    assert work.run(work.receive_one()) == []
    assert runs == ["fails", "probe"]
    assert work.outcomes[-1].kind is Kind.DISCARDED
    assert breaker_state(aws) is BreakerState.CLOSED


# --- a scheduled job: the run audit ------------------------------------------------------------------------


def delivered(schedule: Schedule, moment: datetime) -> str:
    """The body Scheduler sends for ``schedule``'s occurrence at ``moment``."""
    return render_input(schedule_input(schedule, sweep, 0), moment, "arn:aws:scheduler:us-east-1:1:schedule/x/y")


def test_a_discarded_scheduled_run_is_recorded_discarded_with_its_masked_reason_and_no_success_metric(
    work: QueueDriver, aws: Aws, runs: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    moment = datetime(2030, 1, 2, 2, tzinfo=UTC)
    body = delivered(NIGHTLY, moment)
    work.now = moment + timedelta(minutes=1)
    work.send(body)
    work.send(body)  # Scheduler delivers at least once
    first, second = work.receive()
    assert work.run(first) == []
    assert work.run(second) == []

    assert len(runs) == 1
    assert [outcome.kind for outcome in work.outcomes] == [Kind.DISCARDED, Kind.DUPLICATE]
    audit = ScheduleRuns(aws.dynamodb, aws.provisioned.schedule_runs_table, clock=lambda: work.now)
    [row] = audit.runs(NIGHTLY.name)
    assert (row.status, row.reason, row.attempts) == (RunStatus.DISCARDED, f"nothing to sweep with {MASK}", 1)
    state = audit.state(NIGHTLY.name)
    assert state is not None
    assert (state.last_status, state.last_success) == (RunStatus.DISCARDED, None)
    # The dead man's switch counts successes only: a schedule whose runs always discard is one it should catch.
    assert schedule_succeeded_counts(capsys.readouterr().out) == {}


def test_an_occurrence_whose_last_chunk_discards_is_recorded_discarded_by_that_chunk(
    work: QueueDriver, aws: Aws, runs: list[str]
) -> None:
    moment = datetime(2030, 1, 2, 3, tzinfo=UTC)
    work.now = moment + timedelta(minutes=1)
    assert work.run(work.send_and_receive(delivered(CHUNKED, moment))) == []  # continues in its next chunk
    handed_off = work.receive_one()
    work.now = datetime.fromisoformat(json.loads(handed_off["body"])["created_at"]) + timedelta(minutes=1)
    assert work.run(handed_off) == []

    first = "schedule:chunked-sweep@2030-01-02T03:00:00Z"
    assert runs == [first, f"{first}#1"]
    assert [outcome.kind for outcome in work.outcomes] == [Kind.SUCCEEDED, Kind.DISCARDED]
    audit = ScheduleRuns(aws.dynamodb, aws.provisioned.schedule_runs_table, clock=lambda: work.now)
    [row] = audit.runs(CHUNKED.name)
    assert (row.status, row.reason, row.job_id) == (RunStatus.DISCARDED, f"nothing to sweep with {MASK}", f"{first}#1")
