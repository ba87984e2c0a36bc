"""Schedules end to end on the local runtime: the emulator fires them, the workers run them, the audit records them.

The emulator runs on a controllable clock starting at the wall clock's time, so the runs it sends
are a few hours "early" (their created_at lies ahead), which the harness accepts. Nothing waits
for the clock: each step moves it, ticks the emulator, and polls the run audit until the step's
runs are recorded.
"""

from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path

import pytest

from conveyor.contract.schedules import MissedReason, Schedule
from conveyor.contract.topology import Topology
from conveyor.local.demo import Observed
from conveyor.local.runtime import LocalRuntime
from conveyor.local.scheduler import ScheduleClock
from conveyor.worker.schedule_runs import CAUGHT_UP, RunStatus, ScheduleRuns
from tests.e2e.conftest import STOP_S, LocalAws, wait_until
from tests.fixtures.schedule_runs_topology import (
    CATCHING_UP,
    E2E_TOPOLOGY,
    MAX_CATCH_UP_RUNS,
    RUNS,
    SHARDED,
    SHARDS,
    SKIPPING,
)

HOUR = timedelta(hours=1)
SCHEDULES = (CATCHING_UP, SKIPPING, SHARDED)
# Past every shard's flexible window: all of an occurrence's jobs are due.
PAST_WINDOWS = max(schedule.flexible_window or timedelta(0) for schedule in SCHEDULES) + timedelta(minutes=1)

Rows = dict[tuple[datetime, int | None], tuple[RunStatus, str | None]]


@pytest.fixture
def topology() -> Topology:
    return E2E_TOPOLOGY


@pytest.fixture(autouse=True)
def runs() -> Iterator[list[str]]:
    RUNS.clear()
    yield RUNS
    RUNS.clear()


@pytest.fixture
def start() -> datetime:
    """Half past the current hour: the first occurrence is at the next full hour."""
    return datetime.now(UTC).replace(minute=30, second=0, microsecond=0)


@pytest.fixture
def runtime(aws: LocalAws, start: datetime, tmp_path: Path) -> Iterator[LocalRuntime]:
    local = LocalRuntime(
        aws.topology, endpoint_url=aws.endpoint, observer=Observed().record, schedule_clock=ScheduleClock(start)
    )
    local.start(raw_values=tmp_path / "metrics.jsonl")
    try:
        yield local
    finally:
        assert local.drain(grace_s=STOP_S), "in-process workers were still running after the grace period"


@pytest.fixture
def audit(aws: LocalAws) -> ScheduleRuns:
    return ScheduleRuns(aws.dynamodb, aws.provisioned.schedule_runs_table, clock=lambda: datetime.now(UTC))


def rows(audit: ScheduleRuns, schedule: Schedule) -> Rows:
    return {(r.occurrence.scheduled_time, r.occurrence.shard): (r.status, r.reason) for r in audit.runs(schedule.name)}


def fire(runtime: LocalRuntime, hour: datetime) -> None:
    """Move the clock past every shard's window of the occurrence at ``hour``, and let it fire."""
    runtime.scheduler.clock.set(hour + PAST_WINDOWS)
    runtime.scheduler.tick()


def all_succeeded(audit: ScheduleRuns, hour: datetime) -> bool:
    """Every shard's job of every schedule's occurrence at ``hour`` has run."""
    succeeded = Counter(
        record.occurrence.schedule
        for schedule in SCHEDULES
        for record in audit.runs(schedule.name)
        if record.occurrence.scheduled_time == hour and record.status is RunStatus.SUCCEEDED
    )
    return succeeded == {schedule.name: schedule.shards for schedule in SCHEDULES}


def rows_are(audit: ScheduleRuns, schedule: Schedule, wanted: Rows) -> bool:
    return rows(audit, schedule) == wanted


def states_show(audit: ScheduleRuns, last: datetime) -> bool:
    """Every schedule's state: ``last`` scheduled and succeeded, the next hour expected."""
    states = [audit.state(schedule.name) for schedule in SCHEDULES]
    return all(
        state is not None
        and (state.last_scheduled, state.last_success, state.next_expected) == (last, last, last + HOUR)
        for state in states
    )


def test_each_occurrence_fires_and_runs_once_per_shard(
    runtime: LocalRuntime, audit: ScheduleRuns, start: datetime, runs: list[str]
) -> None:
    hours = [start + HOUR / 2, start + HOUR * 3 / 2]
    for hour in hours:
        fire(runtime, hour)
        wait_until(partial(all_succeeded, audit, hour), f"the {hour:%H:%M} runs are recorded")

    assert Counter(Counter(runs).values()) == {1: len(hours) * (2 + SHARDS)}, "each job ran exactly once"
    # A row says succeeded a moment before its schedule's state does.
    wait_until(partial(states_show, audit, hours[-1]), "each schedule's state shows the last run")


def test_after_an_outage_each_schedule_accounts_for_the_missed_hours_as_its_policy_declares(
    runtime: LocalRuntime, audit: ScheduleRuns, start: datetime, runs: list[str]
) -> None:
    first = start + HOUR / 2
    outage = [first + HOUR * n for n in range(1, 5)]
    resumed = outage[-1] + HOUR
    fire(runtime, first)
    wait_until(partial(all_succeeded, audit, first), "the first runs are recorded")

    runtime.scheduler.pause()
    runtime.scheduler.clock.set(outage[-1] + PAST_WINDOWS)
    runtime.scheduler.resume()
    fire(runtime, resumed)

    caught_up, beyond = outage[-MAX_CATCH_UP_RUNS:], outage[:-MAX_CATCH_UP_RUNS]
    succeeded: tuple[RunStatus, str | None] = (RunStatus.SUCCEEDED, None)
    skipped = (RunStatus.MISSED, MissedReason.SKIPPED_BY_POLICY)
    expected: list[tuple[Schedule, Rows]] = [
        (
            CATCHING_UP,
            {
                (first, None): succeeded,
                **{(hour, None): (RunStatus.MISSED, MissedReason.BEYOND_CATCH_UP_LIMIT) for hour in beyond},
                **{(hour, None): (RunStatus.SUCCEEDED, CAUGHT_UP) for hour in caught_up},
                (resumed, None): succeeded,
            },
        ),
        (
            SKIPPING,
            {(first, None): succeeded, **{(hour, None): skipped for hour in outage}, (resumed, None): succeeded},
        ),
        (
            SHARDED,
            {
                **{(first, shard): succeeded for shard in range(SHARDS)},
                **{(hour, shard): skipped for hour in outage for shard in range(SHARDS)},
                **{(resumed, shard): succeeded for shard in range(SHARDS)},
            },
        ),
    ]
    for schedule, wanted in expected:
        wait_until(partial(rows_are, audit, schedule, wanted), f"{schedule.name}'s audit rows are as declared")
    assert max(Counter(runs).values()) == 1, "no occurrence ran twice"
    assert len(runs) == 2 * (2 + SHARDS) + MAX_CATCH_UP_RUNS
