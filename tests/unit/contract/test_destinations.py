"""Destination declarations: what cannot work fails when declared, with one line naming it and the rule."""

from datetime import timedelta
from typing import Any

import pytest

from conveyor.contract.declarations import Queue
from conveyor.contract.destinations import Breaker, Destination, RateLimit
from conveyor.contract.errors import DeclarationError
from conveyor.contract.job_context import JobContext
from conveyor.contract.payloads import Payload
from conveyor.contract.topology import Topology
from conveyor.sdk.jobs import job

QUEUE = Queue("work", age_objective=timedelta(minutes=5))


class Charge(Payload):
    merchant_id: str


@job(queue="work", destinations=("payments",))
def charge(payload: Charge, ctx: JobContext) -> None:
    """Calls the payments destination."""


def topology(*destinations: Destination) -> Topology:
    return Topology(queues=(QUEUE,), job_types=(charge,), destinations=destinations)


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: RateLimit(0), "destination 'd': rate must be a positive whole number of calls, got 0"),
        (lambda: RateLimit(-5), "destination 'd': rate must be a positive whole number of calls, got -5"),
        (lambda: RateLimit(True), "destination 'd': rate must be a positive whole number of calls, got True"),
        (lambda: RateLimit(10, burst=0), "destination 'd': burst must be 1 or more, got 0"),
        (lambda: RateLimit(10, per=timedelta(0)), "destination 'd': rate per must be positive, got 0s"),
        (lambda: RateLimit(10, key="not a field"), "destination 'd': key must name a payload field, got 'not a field'"),
    ],
)
def test_a_rate_limit_that_cannot_work_is_refused_in_one_line(build: Any, message: str) -> None:
    with pytest.raises(DeclarationError) as raised:
        Destination("d", rate=build())
    assert str(raised.value) == message
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"concurrency": 0}, "concurrency must be between 1 and 10000, got 0"),
        ({"concurrency": 10_001}, "concurrency must be between 1 and 10000, got 10001"),
        ({"retry_budget": 0}, "retry_budget must lie in (0, 1], got 0"),
        ({"retry_budget": 1.5}, "retry_budget must lie in (0, 1], got 1.5"),
        ({"retry_budget": -0.1}, "retry_budget must lie in (0, 1], got -0.1"),
        ({"breaker": Breaker(failures=0)}, "breaker failures must be 1 or more, got 0"),
        ({"breaker": Breaker(cool_down=timedelta(0))}, "breaker cool_down must be between 1s and 1h, got 0s"),
        ({"breaker": Breaker(error_rate=0)}, "breaker error_rate must lie in (0, 1], got 0"),
        ({"max_wait": timedelta(seconds=6)}, "max_wait must be between 0 and 5s, got 6s"),
        (
            {"breaker": Breaker(alarm_after=timedelta(days=1, minutes=1))},
            "breaker alarm_after must be between 1min (its alarm's period) and 1d (the longest CloudWatch "
            "evaluates a 1-minute alarm over), got 1441m",
        ),
    ],
)
def test_a_destination_that_cannot_work_is_refused_naming_it_and_the_rule(
    settings: dict[str, Any], message: str
) -> None:
    with pytest.raises(DeclarationError) as raised:
        Destination("payments", **settings)
    assert str(raised.value) == f"destination 'payments': {message}"


def test_a_destination_name_must_be_a_plain_identifier() -> None:
    with pytest.raises(DeclarationError, match=r"^destination 'Pay ments': name must match"):
        Destination("Pay ments")


def test_a_queue_retry_budget_outside_zero_to_one_is_refused() -> None:
    with pytest.raises(DeclarationError) as raised:
        Queue("work", age_objective=timedelta(minutes=5), retry_budget=2.0)
    assert str(raised.value) == "queue 'work': retry_budget must lie in (0, 1], got 2.0"


def test_a_job_naming_an_undeclared_destination_fails_the_topology_naming_both() -> None:
    with pytest.raises(DeclarationError) as raised:
        topology(Destination("email"))
    assert (
        str(raised.value) == "job type 'charge': calls destination 'payments', which is not declared (declared: email)"
    )


def test_a_per_key_limit_on_a_field_the_payload_lacks_fails_the_topology() -> None:
    with pytest.raises(DeclarationError) as raised:
        topology(Destination("payments", rate=RateLimit(10, key="tenant")))
    assert str(raised.value) == (
        "job type 'charge': destination 'payments' limits per 'tenant', which is not a field of Charge"
    )


def test_a_destination_declared_twice_is_refused() -> None:
    with pytest.raises(DeclarationError, match=r"^destination 'payments': declared twice$"):
        topology(Destination("payments"), Destination("payments"))


def test_a_destination_named_twice_by_one_job_is_refused() -> None:
    with pytest.raises(DeclarationError, match=r"destinations names one twice"):
        job(queue="work", destinations=("payments", "payments"))(charge.handler)


def test_a_valid_declaration_is_found_by_name_and_describes_itself() -> None:
    declared = topology(
        Destination(
            "payments",
            rate=RateLimit(50, burst=10, key="merchant_id"),
            concurrency=20,
            breaker=Breaker(),
            retry_budget=0.1,
        )
    )
    assert declared.destination("payments").describe() == (
        "rate 50/s burst 10 per merchant_id, concurrency 20, breaker after 5 failures/1m, retry budget 0.1"
    )
    with pytest.raises(DeclarationError, match=r"^destination 'email' is not declared \(declared: payments\)$"):
        declared.destination("email")
