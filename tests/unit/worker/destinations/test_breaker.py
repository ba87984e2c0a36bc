"""Breakers: opened by K failures for every worker, probed after the cool-down, closed by a probe's success.

In-process moto with a clock that moves only when told, so a cool-down is a step of the clock. The
destination is a plain function that counts its calls; each worker is a ``Breakers`` with its own
boto3 client.
"""

import io
import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from conveyor.contract.destinations import Breaker
from conveyor.worker.destinations import breaker as breaker_module
from conveyor.worker.destinations.breaker import (
    HISTORY_SIZE,
    PROBE_WAIT_S,
    STATE_REFRESH_S,
    WORKER,
    Admission,
    Breakers,
    BreakerState,
    Transition,
)
from conveyor.worker.destinations.state import KEY, TRANSITIONS, breaker_key
from tests.aws import Aws
from tests.unit.worker.destinations.limits_support import NOW, Clock, counted

DESTINATION = "webhooks"
BREAKER = Breaker(failures=3, window=timedelta(minutes=1), cool_down=timedelta(seconds=30))
COOL_DOWN = BREAKER.cool_down.total_seconds()
CLOSED, OPEN, HALF_OPEN = BreakerState.CLOSED, BreakerState.OPEN, BreakerState.HALF_OPEN


class Service:
    """The destination: counts its calls, and fails them while ``failing``."""

    def __init__(self) -> None:
        self.calls = 0
        self.failing = True

    def __call__(self) -> None:
        self.calls += 1
        if self.failing:
            raise ConnectionError("service unavailable")


def call_through(breakers: Breakers, service: Service, breaker: Breaker = BREAKER) -> bool:
    """One call as the guard makes it: admitted, made, its outcome recorded. Whether the service was called."""
    admission = breakers.admit(DESTINATION, breaker)
    if not admission.allowed:
        return False
    try:
        service()
    except ConnectionError:
        breakers.record(DESTINATION, breaker, ok=False, probe=admission.probe)
    else:
        breakers.record(DESTINATION, breaker, ok=True, probe=admission.probe)
    return True


def moves(transitions: list[Transition]) -> list[tuple[BreakerState, BreakerState]]:
    return [(transition.old, transition.new) for transition in transitions]


def failing(client: Any, code: str = "InternalServerError") -> Callable[..., None]:
    """Make every DynamoDB request of ``client`` fail with ``code``, an error moto cannot produce."""

    def fail(model: Any, **_: Any) -> None:
        raise ClientError({"Error": {"Code": code, "Message": "injected"}}, model.name)

    client.meta.events.register("before-call.dynamodb", fail)
    return fail


@pytest.fixture
def transitions() -> list[Transition]:
    return []


@pytest.fixture
def service() -> Service:
    return Service()


@pytest.fixture
def worker_a(aws: Aws, table: str, clock: Clock, transitions: list[Transition]) -> Breakers:
    return Breakers(aws.dynamodb, table, clock=clock, on_transition=transitions.append)


@pytest.fixture
def worker_b(aws: Aws, table: str, clock: Clock, transitions: list[Transition]) -> Breakers:
    return Breakers(boto3.client("dynamodb"), table, clock=clock, on_transition=transitions.append)


def test_k_failures_open_the_breaker_for_every_worker_until_a_probe_after_the_cool_down_succeeds(
    worker_a: Breakers, worker_b: Breakers, clock: Clock, service: Service, transitions: list[Transition]
) -> None:
    workers = (worker_a, worker_b)
    for index in range(BREAKER.failures):
        assert call_through(workers[index % 2], service)
    assert moves(transitions) == [(CLOSED, OPEN)]
    assert transitions[0] == Transition(DESTINATION, CLOSED, OPEN, "3 failures within 1m", at=NOW, by=WORKER)

    # Past the staleness a worker's copy may have, neither worker calls the service.
    clock.advance(STATE_REFRESH_S)
    for worker in workers:
        assert worker.admit(DESTINATION, BREAKER) == Admission(False, False, COOL_DOWN - STATE_REFRESH_S)
        assert not call_through(worker, service)
    assert service.calls == BREAKER.failures

    clock.advance(COOL_DOWN)
    service.failing = False
    assert call_through(worker_b, service)  # the probe
    assert service.calls == BREAKER.failures + 1
    assert moves(transitions) == [(CLOSED, OPEN), (OPEN, HALF_OPEN), (HALF_OPEN, CLOSED)]
    status = worker_a.read(DESTINATION)
    assert (status.state, status.failures, status.open_until, status.reason) == (CLOSED, 0, None, "probe succeeded")

    clock.advance(STATE_REFRESH_S)
    assert all(call_through(worker, service) for worker in workers)
    assert service.calls == BREAKER.failures + 3


def test_a_failed_probe_opens_the_breaker_for_another_cool_down_and_no_one_else_calls_meanwhile(
    worker_a: Breakers, worker_b: Breakers, clock: Clock, service: Service, transitions: list[Transition]
) -> None:
    for _ in range(BREAKER.failures):
        call_through(worker_a, service)
    clock.advance(COOL_DOWN)

    probe = worker_a.admit(DESTINATION, BREAKER)
    assert probe == Admission(allowed=True, probe=True, retry_after=0.0)
    assert worker_b.admit(DESTINATION, BREAKER) == Admission(False, False, PROBE_WAIT_S)
    worker_a.record(DESTINATION, BREAKER, ok=False, probe=True)

    status = worker_b.read(DESTINATION)
    assert (status.state, status.open_until, status.reason) == (OPEN, clock.now + COOL_DOWN, "probe failed")
    assert moves(transitions) == [(CLOSED, OPEN), (OPEN, HALF_OPEN), (HALF_OPEN, OPEN)]
    clock.advance(COOL_DOWN - 1)
    assert not worker_b.admit(DESTINATION, BREAKER).allowed
    clock.advance(1)
    assert worker_b.admit(DESTINATION, BREAKER).probe


def test_probes_that_never_report_are_handed_out_again_after_a_cool_down(
    worker_a: Breakers, worker_b: Breakers, clock: Clock, service: Service, transitions: list[Transition]
) -> None:
    for _ in range(BREAKER.failures):
        call_through(worker_a, service)
    clock.advance(COOL_DOWN)
    assert worker_a.admit(DESTINATION, BREAKER).probe  # and its worker dies before recording it

    clock.advance(COOL_DOWN)
    assert worker_b.admit(DESTINATION, BREAKER).probe
    assert moves(transitions) == [(CLOSED, OPEN), (OPEN, HALF_OPEN)]


def test_failures_racing_on_many_workers_open_the_breaker_exactly_once(
    aws: Aws, table: str, clock: Clock, transitions: list[Transition]
) -> None:
    workers = [
        Breakers(boto3.client("dynamodb"), table, clock=clock, on_transition=transitions.append) for _ in range(6)
    ]
    start = threading.Barrier(len(workers))

    def fail(worker: Breakers) -> None:
        start.wait()
        for _ in range(BREAKER.failures):
            worker.record(DESTINATION, BREAKER, ok=False, probe=False)

    threads = [threading.Thread(target=fail, args=(worker,)) for worker in workers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert moves(transitions) == [(CLOSED, OPEN)]
    status = workers[0].read(DESTINATION)
    assert status.state is OPEN
    assert status.failures >= BREAKER.failures
    assert len(status.history) == 1


def test_failures_of_an_older_window_do_not_count(worker_a: Breakers, clock: Clock, service: Service) -> None:
    for _ in range(BREAKER.failures - 1):
        call_through(worker_a, service)
    clock.advance(BREAKER.window.total_seconds())
    assert call_through(worker_a, service)
    status = worker_a.read(DESTINATION)
    assert (status.state, status.failures, status.window_start) == (CLOSED, 1, clock.now)


def test_requests_per_call_none_for_a_success_one_per_failure_and_one_more_to_open(
    aws: Aws, worker_a: Breakers, clock: Clock, service: Service
) -> None:
    requests = counted(aws.dynamodb)
    service.failing = False
    for _ in range(10):
        assert call_through(worker_a, service)
    assert requests == {"GetItem": 1}  # one read per STATE_REFRESH_S; successes write nothing

    requests.clear()
    service.failing = True
    call_through(worker_a, service)
    assert requests == {"UpdateItem": 1}
    for _ in range(BREAKER.failures - 1):
        call_through(worker_a, service)
    assert requests == {"UpdateItem": BREAKER.failures + 1}

    requests.clear()
    for _ in range(10):
        assert not call_through(worker_a, service)  # open: refused from the worker's copy
    assert requests == {}


BY_RATE = Breaker(failures=1, error_rate=0.5, min_calls=10)


def test_with_an_error_rate_every_call_is_counted_and_too_few_calls_never_open_it(
    aws: Aws, worker_a: Breakers, service: Service, transitions: list[Transition]
) -> None:
    requests = counted(aws.dynamodb)
    for _ in range(BY_RATE.min_calls - 1):  # every call fails, past ``failures``, but too few calls to judge
        assert call_through(worker_a, service, BY_RATE)
    assert transitions == []
    assert requests == {"GetItem": 1, "UpdateItem": BY_RATE.min_calls - 1}  # one write per call


def test_with_an_error_rate_the_share_of_failed_calls_opens_it(
    worker_a: Breakers, service: Service, transitions: list[Transition]
) -> None:
    service.failing = False
    for _ in range(BY_RATE.min_calls):
        assert call_through(worker_a, service, BY_RATE)
    service.failing = True
    for _ in range(BY_RATE.min_calls - 1):  # 9 of 19 failed: under the rate
        assert call_through(worker_a, service, BY_RATE)
    assert transitions == []
    assert call_through(worker_a, service, BY_RATE)  # 10 of 20
    assert moves(transitions) == [(CLOSED, OPEN)]
    assert transitions[0].reason == "10 of 20 calls failed within 1m (error rate at least 0.5)"


def test_forced_open_never_half_opens_and_forced_closed_starts_afresh(
    worker_a: Breakers, worker_b: Breakers, clock: Clock, service: Service, transitions: list[Transition]
) -> None:
    call_through(worker_a, service)
    forced = worker_b.force(DESTINATION, OPEN, reason="INC-7 provider outage", by="ops@example")
    assert forced == Transition(DESTINATION, CLOSED, OPEN, "INC-7 provider outage", at=NOW, by="ops@example")

    clock.advance(10 * COOL_DOWN)
    assert worker_a.admit(DESTINATION, BREAKER) == Admission(False, False, COOL_DOWN)
    status = worker_a.read(DESTINATION)
    assert (status.state, status.forced, status.open_until, status.by) == (OPEN, True, None, "ops@example")

    worker_b.force(DESTINATION, CLOSED, reason="INC-7 resolved", by="ops@example")
    status = worker_a.read(DESTINATION)
    assert (status.state, status.forced, status.failures, status.probes) == (CLOSED, False, 0, 0)
    clock.advance(STATE_REFRESH_S)
    assert call_through(worker_a, service)
    assert moves(transitions) == [(CLOSED, OPEN), (OPEN, CLOSED)]
    assert [transition.by for transition in worker_a.read(DESTINATION).history] == ["ops@example"] * 2


def test_forced_open_for_a_while_probes_once_that_while_is_over(
    worker_a: Breakers, worker_b: Breakers, clock: Clock, transitions: list[Transition]
) -> None:
    worker_b.force(DESTINATION, OPEN, reason="maintenance", by="ops@example", until=NOW + 600)
    assert worker_a.admit(DESTINATION, BREAKER) == Admission(False, False, 600.0)
    clock.advance(600)
    assert worker_a.admit(DESTINATION, BREAKER).probe
    assert transitions[-1].reason == "forced open ended: probing"
    assert not worker_a.read(DESTINATION).forced


def test_the_history_keeps_the_latest_transitions(aws: Aws, table: str, worker_a: Breakers, clock: Clock) -> None:
    for index in range(HISTORY_SIZE):
        worker_a.force(DESTINATION, OPEN, reason=f"drill {index}", by="ops@example")
        clock.advance(1)
        worker_a.force(DESTINATION, CLOSED, reason=f"drill {index} over", by="ops@example")
        clock.advance(1)
    history = worker_a.read(DESTINATION).history
    assert len(history) == HISTORY_SIZE
    assert [transition.reason for transition in history[-2:]] == ["drill 19", "drill 19 over"]
    assert [transition.at for transition in history] == sorted(transition.at for transition in history)
    item = aws.dynamodb.get_item(TableName=table, Key={KEY: {"S": breaker_key(DESTINATION)}})["Item"]
    assert item[TRANSITIONS] == {"N": str(2 * HISTORY_SIZE)}


def test_forcing_half_open_or_with_an_overlong_reason_is_refused(worker_a: Breakers) -> None:
    with pytest.raises(ValueError, match="not half-open"):
        worker_a.force(DESTINATION, HALF_OPEN, reason="try", by="ops@example")
    with pytest.raises(ValueError, match="at most 500 characters"):
        worker_a.force(DESTINATION, OPEN, reason="x" * (breaker_module.MAX_REASON_CHARS + 1), by="ops@example")
    assert worker_a.read(DESTINATION).history == ()


def test_a_destination_never_called_reads_closed(worker_a: Breakers) -> None:
    status = worker_a.read("never-called")
    assert (status.state, status.failures, status.forced, status.reason, status.history) == (
        CLOSED,
        0,
        False,
        None,
        (),
    )


def test_when_dynamodb_fails_calls_are_admitted_and_outcomes_dropped_with_a_warning(
    table: str, worker_a: Breakers, clock: Clock, service: Service, logs: io.StringIO
) -> None:
    for _ in range(BREAKER.failures):
        call_through(worker_a, service)  # open
    clock.advance(STATE_REFRESH_S)

    client = boto3.client("dynamodb")
    cut_off = Breakers(client, table, clock=clock)
    requests = counted(client)
    failing(client, "ProvisionedThroughputExceededException")
    assert cut_off.admit(DESTINATION, BREAKER) == Admission(allowed=True, probe=False, retry_after=0.0)
    assert cut_off.admit(DESTINATION, BREAKER).allowed  # the outage is not asked again within STATE_REFRESH_S
    cut_off.record(DESTINATION, BREAKER, ok=False, probe=False)
    assert requests == {"GetItem": 1, "UpdateItem": 1}
    assert "breaker state unavailable: admitting the call" in logs.getvalue()
    assert "breaker state unavailable: outcome not counted" in logs.getvalue()
    assert worker_a.read(DESTINATION).state is OPEN
