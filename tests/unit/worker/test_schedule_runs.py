"""The run audit through the harness on moto: one run per occurrence, the missed-run policies, failures, the metric.

Each occurrence is delivered as Scheduler delivers it (``render_input`` of the schedule's target
input) and run by ``Worker(Harness(...))`` with the driver's clock set just after its scheduled
time. An outage is simply occurrences that were never delivered.
"""

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from conveyor.contract.reasons import Reason
from conveyor.contract.schedule_inputs import Occurrence, render_catch_up, render_input, schedule_input
from conveyor.contract.schedules import MissedReason, Schedule
from conveyor.contract.topology import Topology
from conveyor.ops.schedule_pauses import SchedulePauses
from conveyor.worker import missed_runs
from conveyor.worker.lease import Leases
from conveyor.worker.lease_values import Lease
from conveyor.worker.outcomes import Kind
from conveyor.worker.schedule_runs import CAUGHT_UP, PauseWindow, RunStatus, ScheduleRuns, occurrence_job_id
from tests.aws import Aws
from tests.fixtures.schedule_runs_topology import (
    CATCHING_UP,
    CHUNKED,
    DEPENDENT,
    FAILING,
    LEASE_TTL,
    LEASED,
    MAX_CATCH_UP_RUNS,
    QUEUE,
    RUNS,
    SHARDED,
    SHARDS,
    SKIPPING,
    SNOOZE,
    TOPOLOGY,
    Hooks,
    tick,
)
from tests.harness_support import QueueDriver, Record, requests_to, schedule_succeeded_counts

ARN = "arn:aws:scheduler:us-east-1:123456789012:schedule/conveyor/test"
# Runs happen this long after their scheduled time (Scheduler's own delay, plus the queue's).
RUN_DELAY = timedelta(minutes=1)
HOUR = timedelta(hours=1)
BEFORE = datetime(2030, 1, 1, 7, tzinfo=UTC)
# Four hourly occurrences (08:00 to 11:00) are never delivered between BEFORE and AFTER.
AFTER = datetime(2030, 1, 1, 12, tzinfo=UTC)
OUTAGE = [BEFORE + HOUR * n for n in range(1, 5)]


@pytest.fixture(autouse=True)
def runs() -> Iterator[list[str]]:
    RUNS.clear()
    yield RUNS
    RUNS.clear()


@pytest.fixture
def topology() -> Topology:
    return TOPOLOGY


@pytest.fixture
def queue(aws: Aws) -> QueueDriver:
    return QueueDriver(aws, QUEUE)


@pytest.fixture
def audit(aws: Aws) -> ScheduleRuns:
    return ScheduleRuns(aws.dynamodb, aws.provisioned.schedule_runs_table, clock=lambda: AFTER)


def delivered(schedule: Schedule, moment: datetime, shard: int = 0) -> str:
    """The body Scheduler sends for ``schedule``'s occurrence at ``moment``."""
    return render_input(schedule_input(schedule, tick, shard), moment, ARN)


def run_occurrence(queue: QueueDriver, schedule: Schedule, moment: datetime) -> None:
    """Deliver and run every shard's job of one occurrence, just after its scheduled time."""
    queue.now = moment + RUN_DELAY
    for shard in range(schedule.shards):
        queue.send(delivered(schedule, moment, shard))
    assert queue.run(*queue.receive()) == []


def run_queued(queue: QueueDriver) -> list[str]:
    """Run whatever is on the queue (catch-ups), in one invocation; their job ids."""
    records = queue.receive()
    assert queue.run(*records) == []
    return [json.loads(record["body"])["id"] for record in records]


def rows(audit: ScheduleRuns, schedule: Schedule) -> dict[datetime, tuple[RunStatus, str | None]]:
    return {r.occurrence.scheduled_time: (r.status, r.reason) for r in audit.runs(schedule.name)}


def job_id(schedule: Schedule, moment: datetime, shard: int | None = None) -> str:
    return occurrence_job_id(Occurrence(schedule.name, moment, shard))


def test_duplicate_delivery_of_an_occurrence_runs_it_once_with_one_succeeded_row(
    queue: QueueDriver, audit: ScheduleRuns, runs: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    body = delivered(SKIPPING, AFTER)
    queue.now = AFTER + RUN_DELAY
    queue.send(body)
    queue.send(body)
    first, second = queue.receive()
    assert queue.run(first) == []
    assert queue.run(second) == []
    # And once more, as a redrive or a late Scheduler retry would bring it.
    assert queue.run(queue.send_and_receive(body)) == []

    assert runs == [job_id(SKIPPING, AFTER)]
    assert [outcome.kind for outcome in queue.outcomes] == [Kind.SUCCEEDED, Kind.DUPLICATE, Kind.DUPLICATE]
    (row,) = audit.runs(SKIPPING.name)
    assert (row.status, row.reason, row.attempts, row.job_id) == (RunStatus.SUCCEEDED, None, 1, job_id(SKIPPING, AFTER))
    assert schedule_succeeded_counts(capsys.readouterr().out) == {SKIPPING.name: 1}


def test_catch_up_after_an_outage_enqueues_max_runs_and_records_the_rest_missed(
    queue: QueueDriver, audit: ScheduleRuns, aws: Aws
) -> None:
    run_occurrence(queue, CATCHING_UP, BEFORE)
    run_occurrence(queue, CATCHING_UP, AFTER)

    caught_up, beyond = OUTAGE[-MAX_CATCH_UP_RUNS:], OUTAGE[:-MAX_CATCH_UP_RUNS]
    messages = aws.receive(queue.url)
    bodies = sorted((json.loads(message["Body"]) for message in messages), key=lambda body: str(body["id"]))
    assert [body["id"] for body in bodies] == [job_id(CATCHING_UP, moment) for moment in caught_up]
    # Enqueued now, so that max_wall_time counts from the catch-up, not from the missed occurrence.
    assert {body["created_at"] for body in bodies} == {(AFTER + RUN_DELAY).isoformat()}
    assert rows(audit, CATCHING_UP) == {
        BEFORE: (RunStatus.SUCCEEDED, None),
        **dict.fromkeys(beyond, (RunStatus.MISSED, MissedReason.BEYOND_CATCH_UP_LIMIT)),
        **dict.fromkeys(caught_up, (RunStatus.PENDING, CAUGHT_UP)),
        AFTER: (RunStatus.SUCCEEDED, None),
    }
    state = audit.state(CATCHING_UP.name)
    assert state is not None
    assert (state.last_scheduled, state.last_success, state.last_status, state.next_expected) == (
        AFTER,
        AFTER,
        RunStatus.SUCCEEDED,
        AFTER + HOUR,
    )


def test_catch_up_runs_succeed_without_looking_for_missed_occurrences_again(
    queue: QueueDriver, audit: ScheduleRuns, aws: Aws, runs: list[str]
) -> None:
    run_occurrence(queue, CATCHING_UP, BEFORE)
    run_occurrence(queue, CATCHING_UP, AFTER)

    assert sorted(run_queued(queue)) == [job_id(CATCHING_UP, moment) for moment in OUTAGE[-MAX_CATCH_UP_RUNS:]]

    assert aws.receive(queue.url) == [], "a catch-up run must not enqueue catch-ups of its own"
    assert len(runs) == 2 + MAX_CATCH_UP_RUNS
    recorded = rows(audit, CATCHING_UP)
    assert [recorded[moment] for moment in OUTAGE[-MAX_CATCH_UP_RUNS:]] == [(RunStatus.SUCCEEDED, CAUGHT_UP)] * 2
    state = audit.state(CATCHING_UP.name)
    assert state is not None
    assert (state.last_scheduled, state.last_success) == (AFTER, AFTER), "older successes never move the state back"


def test_a_catch_up_that_runs_before_its_enqueuer_advanced_the_state_looks_for_nothing_missed(
    queue: QueueDriver, audit: ScheduleRuns, aws: Aws, runs: list[str]
) -> None:
    """Another worker may pick a catch-up up while the run that sent it is still recording the outage."""
    run_occurrence(queue, CATCHING_UP, BEFORE)
    late = OUTAGE[-1]
    queue.now = AFTER + RUN_DELAY
    body = render_catch_up(schedule_input(CATCHING_UP, tick), late, ARN, queue.now)

    assert queue.run(queue.send_and_receive(body)) == []

    assert aws.receive(queue.url) == []
    assert runs == [job_id(CATCHING_UP, BEFORE), job_id(CATCHING_UP, late)]
    assert rows(audit, CATCHING_UP) == {BEFORE: (RunStatus.SUCCEEDED, None), late: (RunStatus.SUCCEEDED, CAUGHT_UP)}


def test_a_catch_up_sqs_refuses_fails_the_run_and_its_retry_finishes_the_gap(
    queue: QueueDriver, audit: ScheduleRuns, aws: Aws, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_occurrence(queue, CATCHING_UP, BEFORE)
    monkeypatch.setattr(aws.sqs, "send_message_batch", _refuse_every_entry)
    queue.now = AFTER + RUN_DELAY
    record = queue.send_and_receive(delivered(CATCHING_UP, AFTER))

    assert queue.run(record) == [record["messageId"]], "retried, like any failure"
    state = audit.state(CATCHING_UP.name)
    assert state is not None
    assert state.last_scheduled == BEFORE, "the gap stays open"
    assert RunStatus.PENDING not in {status for status, _ in rows(audit, CATCHING_UP).values()}

    monkeypatch.undo()
    assert queue.run(queue.redeliver(record)) == []  # the retry runs the job and finishes the policy
    caught_up = sorted(json.loads(message["Body"])["id"] for message in aws.receive(queue.url))
    assert caught_up == [job_id(CATCHING_UP, moment) for moment in OUTAGE[-MAX_CATCH_UP_RUNS:]]
    state = audit.state(CATCHING_UP.name)
    assert state is not None
    assert state.last_scheduled == AFTER
    recorded = rows(audit, CATCHING_UP)
    expected = [RunStatus.MISSED] * (len(OUTAGE) - MAX_CATCH_UP_RUNS) + [RunStatus.PENDING] * MAX_CATCH_UP_RUNS
    assert [recorded[moment][0] for moment in OUTAGE] == expected


def test_a_retry_after_a_partly_applied_policy_catches_up_no_more_than_max_runs(
    queue: QueueDriver, audit: ScheduleRuns, aws: Aws, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The catch-ups went out, then recording the older misses failed: the retry must not catch those up."""
    run_occurrence(queue, CATCHING_UP, BEFORE)
    record_missed = ScheduleRuns.record_missed

    def failing(self: ScheduleRuns, occurrence: Any, reason: str) -> bool:
        raise RuntimeError("DynamoDB throttled")

    monkeypatch.setattr(ScheduleRuns, "record_missed", failing)
    queue.now = AFTER + RUN_DELAY
    record = queue.send_and_receive(delivered(CATCHING_UP, AFTER))
    assert queue.run(record) == [record["messageId"]]
    monkeypatch.setattr(ScheduleRuns, "record_missed", record_missed)

    queue.end_backoff(record)
    delivered_now = queue.receive()  # the retry, and the catch-ups the first attempt sent
    (retry,) = [message for message in delivered_now if message["messageId"] == record["messageId"]]
    assert queue.run(retry) == []
    others = [message["body"] for message in delivered_now if message is not retry]
    caught_up = [json.loads(body)["id"] for body in others + [m["Body"] for m in aws.receive(queue.url)]]
    assert sorted(set(caught_up)) == [job_id(CATCHING_UP, moment) for moment in OUTAGE[-MAX_CATCH_UP_RUNS:]]
    recorded = rows(audit, CATCHING_UP)
    assert [recorded[moment][0] for moment in OUTAGE[:-MAX_CATCH_UP_RUNS]] == [RunStatus.MISSED] * 2


def _refuse_every_entry(**request: Any) -> dict[str, Any]:
    failed = [{"Id": entry["Id"], "Code": "InternalError", "SenderFault": False} for entry in request["Entries"]]
    return {"Successful": [], "Failed": failed}


def test_skip_records_every_missed_occurrence_with_its_reason_and_runs_none(
    queue: QueueDriver, audit: ScheduleRuns, aws: Aws, runs: list[str]
) -> None:
    run_occurrence(queue, SKIPPING, BEFORE)
    run_occurrence(queue, SKIPPING, AFTER)

    assert aws.receive(queue.url) == []
    assert runs == [job_id(SKIPPING, BEFORE), job_id(SKIPPING, AFTER)]
    assert rows(audit, SKIPPING) == {
        BEFORE: (RunStatus.SUCCEEDED, None),
        **dict.fromkeys(OUTAGE, (RunStatus.MISSED, MissedReason.SKIPPED_BY_POLICY)),
        AFTER: (RunStatus.SUCCEEDED, None),
    }


def test_a_sharded_schedule_records_each_shard_of_each_missed_occurrence(
    queue: QueueDriver, audit: ScheduleRuns, runs: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    run_occurrence(queue, SHARDED, BEFORE)
    run_occurrence(queue, SHARDED, AFTER)

    recorded = {(r.occurrence.scheduled_time, r.occurrence.shard): r.status for r in audit.runs(SHARDED.name)}
    shards = range(SHARDS)
    assert recorded == {
        **{(moment, shard): RunStatus.SUCCEEDED for moment in (BEFORE, AFTER) for shard in shards},
        **{(moment, shard): RunStatus.MISSED for moment in OUTAGE for shard in shards},
    }
    assert sorted(runs) == sorted(job_id(SHARDED, moment, shard) for moment in (BEFORE, AFTER) for shard in shards)
    out = capsys.readouterr().out
    assert schedule_succeeded_counts(out) == {SHARDED.name: 2 * SHARDS}
    # Each shard's own dead man's switch reads {schedule, shard}.
    assert schedule_succeeded_counts(out, per_shard=True) == {(SHARDED.name, shard): 2 for shard in shards}


def test_a_first_run_after_a_long_outage_records_only_the_latest_missed_occurrences(
    queue: QueueDriver, audit: ScheduleRuns, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(missed_runs, "MAX_MISSED_ROWS", 2)
    run_occurrence(queue, SKIPPING, BEFORE)
    run_occurrence(queue, SKIPPING, AFTER)

    assert list(rows(audit, SKIPPING)) == [BEFORE, *OUTAGE[-2:], AFTER]


def test_a_dead_lettered_run_is_recorded_failed_with_its_reason_and_writes_no_metric(
    queue: QueueDriver, audit: ScheduleRuns, capsys: pytest.CaptureFixture[str]
) -> None:
    moment = AFTER + timedelta(minutes=30)
    run_occurrence(queue, FAILING, moment)

    assert len(queue.dead_letters()) == 1
    (row,) = audit.runs(FAILING.name)
    assert (row.status, row.reason, row.attempts) == (RunStatus.FAILED, Reason.PERMANENT_ERROR, 1)
    state = audit.state(FAILING.name)
    assert state is not None
    assert (state.last_scheduled, state.last_status, state.last_success) == (moment, RunStatus.FAILED, None)
    assert schedule_succeeded_counts(capsys.readouterr().out) == {}


def test_a_continued_chunk_of_a_scheduled_job_is_not_taken_for_an_occurrence(
    queue: QueueDriver, audit: ScheduleRuns, runs: list[str]
) -> None:
    """``<occurrence id>#1`` is the id of its next chunk; on an unsharded schedule, it reads like shard 1's.

    It claims nothing and looks for no missed occurrence: only the occurrence's own first run does.
    """
    chunk = json.loads(delivered(SKIPPING, AFTER))
    chunk["id"] = f"{chunk['id']}#1"
    queue.now = AFTER + RUN_DELAY
    assert queue.run(queue.send_and_receive(json.dumps(chunk))) == []

    assert runs == [chunk["id"]]
    assert audit.state(SKIPPING.name) is None


def run_chunk(queue: QueueDriver, record: Record | None = None) -> str:
    """Run the chunk the last run handed off, on the clock it was enqueued at (a hand-off stamps ``created_at``
    with the time of the enqueue, as every producer does); its job id."""
    record = record or queue.receive_one()
    envelope = json.loads(record["body"])
    queue.now = datetime.fromisoformat(envelope["created_at"]) + RUN_DELAY
    assert queue.run(record) == []
    return str(envelope["id"])


def test_an_occurrence_that_continues_in_chunks_succeeds_with_its_last_chunk_only(
    queue: QueueDriver, audit: ScheduleRuns, runs: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    first = delivered(CHUNKED, AFTER)
    queue.now = AFTER + RUN_DELAY
    assert queue.run(queue.send_and_receive(first)) == []
    assert rows(audit, CHUNKED) == {AFTER: (RunStatus.RUNNING, None)}, "its first chunk continued: not done yet"
    assert run_chunk(queue) == f"{job_id(CHUNKED, AFTER)}#1"
    assert rows(audit, CHUNKED) == {AFTER: (RunStatus.RUNNING, None)}
    assert schedule_succeeded_counts(capsys.readouterr().out) == {}
    last = queue.receive_one()  # held aside while a duplicate of the first chunk comes back
    queue.now = AFTER + RUN_DELAY
    assert queue.run(queue.send_and_receive(first)) == []  # absorbed: it must not mark the occurrence succeeded
    assert rows(audit, CHUNKED) == {AFTER: (RunStatus.RUNNING, None)}

    assert run_chunk(queue, last) == f"{job_id(CHUNKED, AFTER)}#2"  # the last chunk completes

    (row,) = audit.runs(CHUNKED.name)
    assert (row.status, row.job_id) == (RunStatus.SUCCEEDED, f"{job_id(CHUNKED, AFTER)}#2")
    state = audit.state(CHUNKED.name)
    assert state is not None
    assert (state.last_status, state.last_success) == (RunStatus.SUCCEEDED, AFTER)
    assert schedule_succeeded_counts(capsys.readouterr().out) == {CHUNKED.name: 1}
    assert runs == [job_id(CHUNKED, AFTER), f"{job_id(CHUNKED, AFTER)}#1", f"{job_id(CHUNKED, AFTER)}#2"]


@pytest.fixture
def breaker_open() -> Iterator[None]:
    Hooks.breaker_open = True
    yield
    Hooks.breaker_open = False


def snoozed_run(queue: QueueDriver, aws: Aws, schedule: Schedule, moment: datetime) -> dict[str, Any]:
    """Deliver and run the occurrence, which snoozes; the copy the harness re-sent for later."""
    queue.now = moment + RUN_DELAY
    record = queue.send_and_receive(delivered(schedule, moment))
    with requests_to(aws.sqs, "SendMessage") as sends:
        assert queue.run(record) == []
    assert [outcome.kind for outcome in queue.outcomes] == [Kind.SNOOZED]
    (resend,) = sends
    return resend


@pytest.mark.usefixtures("breaker_open")
def test_a_run_snoozed_on_an_open_breaker_is_pending_as_dependency_down_until_it_runs(
    queue: QueueDriver, audit: ScheduleRuns, aws: Aws, runs: list[str]
) -> None:
    resend = snoozed_run(queue, aws, DEPENDENT, AFTER)
    assert rows(audit, DEPENDENT) == {AFTER: (RunStatus.PENDING, MissedReason.DEPENDENCY_DOWN)}
    assert runs == []

    Hooks.breaker_open = False  # the dependency is back
    queue.now += SNOOZE
    queue.resend_now(resend)
    assert queue.run(queue.receive_one()) == []

    assert runs == [job_id(DEPENDENT, AFTER)]
    (row,) = audit.runs(DEPENDENT.name)
    assert (row.status, row.reason) == (RunStatus.SUCCEEDED, MissedReason.DEPENDENCY_DOWN), "it waited, then ran"


@pytest.mark.usefixtures("breaker_open")
def test_a_run_whose_dependency_stays_down_past_its_wall_time_fails_as_dependency_down(
    queue: QueueDriver, audit: ScheduleRuns, aws: Aws, runs: list[str]
) -> None:
    resend = snoozed_run(queue, aws, DEPENDENT, AFTER)
    queue.now = AFTER + tick.retry.max_wall_time + HOUR  # still down when it comes back, too late to run
    queue.resend_now(resend)

    assert queue.run(queue.receive_one()) == []

    assert [letter.attributes["conveyor.reason"] for letter in queue.dead_letters()] == [Reason.DEADLINE_EXCEEDED]
    assert rows(audit, DEPENDENT) == {AFTER: (RunStatus.FAILED, MissedReason.DEPENDENCY_DOWN)}
    state = audit.state(DEPENDENT.name)
    assert state is not None
    assert state.last_status == RunStatus.FAILED
    assert runs == []


@pytest.fixture
def leases(aws: Aws) -> Iterator[list[datetime]]:
    """The leased job's leases, on a clock the test moves; reset after."""
    now = [AFTER]
    Hooks.leases = Leases(aws.dynamodb, aws.provisioned.leases_table, clock=lambda: now[0])
    yield now
    Hooks.leases = None
    Hooks.while_holding = staticmethod(lambda lease: None)


def test_a_shard_whose_lease_is_taken_over_is_recorded_lease_lost_and_neither_retried_nor_dead_lettered(
    queue: QueueDriver, audit: ScheduleRuns, leases: list[datetime], capsys: pytest.CaptureFixture[str]
) -> None:
    def stall_on_shard_0(lease: Lease) -> None:
        if lease.name.endswith("-0"):  # shard 0 stalls past its lease, and a standby takes the shard over
            leases[0] = lease.expires_at + timedelta(seconds=1)
            assert Hooks.leases is not None
            assert Hooks.leases.acquire(lease.name, holder="standby", ttl=LEASE_TTL) is not None

    Hooks.while_holding = staticmethod(stall_on_shard_0)
    run_occurrence(queue, LEASED, AFTER)  # no batch item failure: nothing is retried

    recorded = {r.occurrence.shard: (r.status, r.reason) for r in audit.runs(LEASED.name)}
    assert recorded == {0: (RunStatus.MISSED, MissedReason.LEASE_LOST), 1: (RunStatus.SUCCEEDED, None)}
    assert queue.dead_letters() == []
    assert sorted(outcome.kind for outcome in queue.outcomes) == sorted([Kind.DISCARDED, Kind.SUCCEEDED])
    out = capsys.readouterr().out
    assert schedule_succeeded_counts(out, per_shard=True) == {(LEASED.name, 1): 1}, "shard 0's alarm sees no success"


def test_occurrences_that_fell_due_while_the_queue_was_paused_are_missed_as_paused_and_never_caught_up(
    queue: QueueDriver, audit: ScheduleRuns, aws: Aws
) -> None:
    run_occurrence(queue, CATCHING_UP, BEFORE)
    pause_clock = [BEFORE + timedelta(minutes=30)]
    pauses = SchedulePauses(TOPOLOGY, aws.dynamodb, aws.provisioned.schedule_runs_table, clock=lambda: pause_clock[0])
    assert CATCHING_UP.name in pauses.queue_paused(QUEUE)
    pause_clock[0] = OUTAGE[1] + timedelta(minutes=30)
    pauses.queue_resumed(QUEUE)  # paused through the first two occurrences of the outage

    run_occurrence(queue, CATCHING_UP, AFTER)

    paused = (RunStatus.MISSED, MissedReason.PAUSED)
    assert rows(audit, CATCHING_UP) == {
        BEFORE: (RunStatus.SUCCEEDED, None),
        OUTAGE[0]: paused,
        OUTAGE[1]: paused,
        OUTAGE[2]: (RunStatus.PENDING, CAUGHT_UP),  # catch_up(2) takes the two the pause did not cover
        OUTAGE[3]: (RunStatus.PENDING, CAUGHT_UP),
        AFTER: (RunStatus.SUCCEEDED, None),
    }
    assert sorted(run_queued(queue)) == [job_id(CATCHING_UP, moment) for moment in OUTAGE[2:]]


def test_a_scheduled_job_that_waited_out_a_queue_pause_past_its_wall_time_is_let_go_as_paused(
    queue: QueueDriver, audit: ScheduleRuns, aws: Aws, runs: list[str]
) -> None:
    run_occurrence(queue, SKIPPING, BEFORE)
    timed = SchedulePauses(TOPOLOGY, aws.dynamodb, aws.provisioned.schedule_runs_table, clock=lambda: BEFORE + HOUR / 2)
    timed.queue_paused(QUEUE, until=AFTER + timedelta(days=2))  # a timed pause: it ends by itself
    queue.now = OUTAGE[0] + tick.retry.max_wall_time + HOUR  # delivered when the queue resumes, too late

    assert queue.run(queue.send_and_receive(delivered(SKIPPING, OUTAGE[0]))) == []

    assert queue.dead_letters() == [], "a pause is an operator's decision, not a failure"
    assert rows(audit, SKIPPING)[OUTAGE[0]] == (RunStatus.MISSED, MissedReason.PAUSED)
    assert [(o.kind, o.reason) for o in queue.outcomes] == [(Kind.SUCCEEDED, None), (Kind.DISCARDED, "paused")]
    assert runs == [job_id(SKIPPING, BEFORE)]


def test_a_pause_over_a_pause_keeps_its_start_and_a_resume_closes_it_at_the_planned_end(aws: Aws) -> None:
    runs = ScheduleRuns(aws.dynamodb, aws.provisioned.schedule_runs_table, clock=lambda: AFTER)
    runs.pause(SKIPPING.name, BEFORE, until=OUTAGE[0])
    runs.pause(SKIPPING.name, OUTAGE[1], until=OUTAGE[2])  # extended before it ended
    runs.resume(SKIPPING.name, AFTER)  # after the planned end: the pause ended then

    state = runs.state(SKIPPING.name)
    assert state is not None
    assert state.pauses == (PauseWindow(BEFORE, OUTAGE[2]),)
    assert [state.paused_at(t) for t in (BEFORE, OUTAGE[2], AFTER)] == [True, False, False]
    runs.resume(SKIPPING.name, AFTER)  # nothing open: nothing changes
    assert runs.state(SKIPPING.name) == state


def test_a_stale_copy_dead_lettered_for_its_age_leaves_a_queued_catch_up_alone(
    queue: QueueDriver, audit: ScheduleRuns, aws: Aws
) -> None:
    """Scheduler's own delivery of a missed occurrence turns up after the outage, too old to run."""
    run_occurrence(queue, CATCHING_UP, BEFORE)
    run_occurrence(queue, CATCHING_UP, AFTER)  # catches up the newest missed occurrences
    assert len(aws.receive(queue.url)) == MAX_CATCH_UP_RUNS  # the catch-ups, held aside
    late = OUTAGE[-1]
    queue.now = late + timedelta(days=2)  # past tick's max_wall_time: dead-lettered on arrival
    stale = queue.send_and_receive(delivered(CATCHING_UP, late))

    assert queue.run(stale) == []

    assert [letter.attributes["conveyor.reason"] for letter in queue.dead_letters()] == [Reason.DEADLINE_EXCEEDED]
    assert rows(audit, CATCHING_UP)[late] == (RunStatus.PENDING, CAUGHT_UP)
