"""A declared job: its name and model inferred, callable as its handler, enqueued by its payload's type."""

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any, NoReturn

import pytest
from aws_lambda_powertools import Logger

from conveyor.contract.envelope import Correlation, parse_envelope
from conveyor.contract.errors import DeclarationError, InvalidJobError
from conveyor.contract.job_context import JobContext
from conveyor.contract.payloads import Payload
from conveyor.sdk import client_context
from conveyor.sdk.client import JobClient
from conveyor.sdk.client_context import default_client, using_client
from conveyor.sdk.jobs import Job, job
from functions.jobs.charge_order import ChargeOrder, charge_order
from functions.jobs.send_welcome_email import WelcomeEmail, send_welcome_email
from functions.topology import TOPOLOGY
from tests.aws import Aws
from tests.unit.sdk.test_producer import drain


class Greet(Payload):
    name: str


class NoProgress:
    """A run without checkpoints, for calling a handler directly."""

    def resume_state(self) -> dict[str, Any] | None:
        return None

    def checkpoint(self, state: object) -> None:
        raise AssertionError("not expected")

    def continue_later(self, state: object) -> NoReturn:
        raise AssertionError("not expected")


def context(job_type: str) -> JobContext:
    return JobContext(
        job_id="job-1",
        job_type=job_type,
        attempt=1,
        max_attempts=5,
        idempotency_key="job-1",
        created_at=datetime.now(UTC),
        correlation=Correlation(),
        logger=Logger(service="test"),
        deadline_monotonic=time.monotonic() + 30,
        progress=NoProgress(),
    )


@pytest.fixture
def client(aws: Aws) -> JobClient:
    return JobClient(TOPOLOGY, sqs_client=aws.sqs)


@pytest.fixture
def fresh_process_client() -> Iterator[None]:
    """No process-wide client left over from another test, nor left behind for the next."""
    client_context._process_client.cache_clear()
    yield
    client_context._process_client.cache_clear()


def test_the_name_defaults_to_the_function_and_the_model_to_the_first_annotation() -> None:
    @job(queue="default")
    def greet(payload: Greet, ctx: JobContext) -> str:
        return f"hello {payload.name} from {ctx.job_type}"

    assert isinstance(greet, Job)
    assert (greet.name, greet.queue, greet.model) == ("greet", "default", Greet)
    assert greet(Greet(name="Ada"), context("greet")) == "hello Ada from greet"


def test_explicit_name_and_model_win_over_inference() -> None:
    @job("say_hello", queue="default", model=Greet)
    def greet(payload: Greet, ctx: JobContext) -> None: ...

    assert (greet.name, greet.model) == ("say_hello", Greet)


def test_an_explicit_model_that_is_not_the_annotated_one_fails_naming_both() -> None:
    def greet(payload: WelcomeEmail, ctx: JobContext) -> None: ...

    with pytest.raises(
        DeclarationError, match=r"^job .*greet: model=Greet but the first parameter is annotated WelcomeEmail: enqueue"
    ):
        job(queue="default", model=Greet)(greet)


def test_an_explicit_model_needs_no_readable_annotation() -> None:
    def later(payload: "Missing", ctx: JobContext) -> None: ...  # type: ignore[name-defined]  # noqa: F821

    assert job(queue="default", model=Greet)(later).model is Greet


def test_a_function_name_that_is_no_job_type_name_fails_naming_the_function() -> None:
    def Greet_Someone(payload: Greet, ctx: JobContext) -> None: ...  # noqa: N802 - the name under test

    with pytest.raises(DeclarationError, match=r"^job tests\.unit\.sdk\.test_jobs\..*Greet_Someone: the function name"):
        job(queue="default")(Greet_Someone)


def test_a_handler_without_a_model_annotation_fails_naming_the_function() -> None:
    def untyped(payload, ctx):  # type: ignore[no-untyped-def]  # the missing annotation under test
        pass

    with pytest.raises(DeclarationError, match=r"^job .*untyped: annotate the first parameter with the payload model"):
        job(queue="default")(untyped)


def test_an_unresolvable_annotation_fails_naming_the_function() -> None:
    def later(payload: "Missing", ctx: JobContext) -> None: ...  # type: ignore[name-defined]  # noqa: F821

    with pytest.raises(DeclarationError, match=r"^job .*later: cannot read its annotations .*Missing.*; pass model="):
        job(queue="default")(later)


def test_a_model_that_allows_extra_fields_is_still_refused() -> None:
    from pydantic import BaseModel

    class Loose(BaseModel):
        name: str

    def loose(payload: Loose, ctx: JobContext) -> None: ...

    with pytest.raises(DeclarationError, match="job type 'loose': model Loose must forbid extra fields"):
        job(queue="default")(loose)


def test_enqueue_sends_the_typed_payload_through_the_given_client(aws: Aws, client: JobClient) -> None:
    payload = ChargeOrder(order_id="o-1", amount_cents=1250, currency="EUR")
    job_id = charge_order.enqueue(payload, dedupe_key="checkout-1", client=client)
    (message,) = drain(aws, "critical")
    envelope = parse_envelope(message["Body"])
    assert (envelope.id, envelope.type, envelope.dedupe_key) == (job_id, "charge_order", "checkout-1")
    assert envelope.data == payload.model_dump(mode="json")


def test_enqueue_many_returns_ids_in_payload_order(aws: Aws, client: JobClient) -> None:
    ids = send_welcome_email.enqueue_many([WelcomeEmail(user_id=f"u-{n}") for n in range(12)], client=client)
    by_id = {
        envelope.id: envelope.data["user_id"]
        for envelope in map(parse_envelope, (m["Body"] for m in drain(aws, "default")))
    }
    assert [by_id[job_id] for job_id in ids] == [f"u-{n}" for n in range(12)]


def test_request_is_a_job_request_with_its_options() -> None:
    request = send_welcome_email.request(WelcomeEmail(user_id="u-1"), dedupe_key="k", delay=timedelta(seconds=5))
    assert (request.job, request.dedupe_key, request.delay) == (send_welcome_email, "k", timedelta(seconds=5))


def test_a_wrong_payload_type_is_refused_before_anything_is_sent(aws: Aws, client: JobClient) -> None:
    wrong: Any = WelcomeEmail(user_id="u-1")
    with pytest.raises(InvalidJobError, match="payload is a WelcomeEmail; expected ChargeOrder or a dict"):
        charge_order.enqueue(wrong, client=client)
    assert drain(aws, "critical") == []


def test_using_client_routes_enqueues_without_a_client_and_nests(aws: Aws, client: JobClient) -> None:
    inner = JobClient(TOPOLOGY, sqs_client=aws.sqs)
    with using_client(client) as outer:
        assert outer is client
        assert default_client() is client
        with using_client(inner):
            assert default_client() is inner
            send_welcome_email.enqueue(WelcomeEmail(user_id="u-1"))
        assert default_client() is client
    assert len(drain(aws, "default")) == 1


@pytest.mark.usefixtures("fresh_process_client")
def test_the_default_client_is_built_once_from_the_project_topology(aws: Aws) -> None:
    assert default_client() is default_client()
    job_id = send_welcome_email.enqueue(WelcomeEmail(user_id="u-1"))
    (message,) = drain(aws, "default")
    assert parse_envelope(message["Body"]).id == job_id


@pytest.mark.usefixtures("fresh_process_client")
def test_a_request_needs_no_client_and_the_default_client_reads_the_topology_setting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CONVEYOR_TOPOLOGY", "no_such_module:TOPOLOGY")
    charge_order.request(ChargeOrder(order_id="o-1", amount_cents=1, currency="EUR"))
    with pytest.raises(DeclarationError, match="cannot import 'no_such_module'"):
        default_client()
