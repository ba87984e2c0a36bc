"""The relay's Lambda entry point: settings from the environment, sequence numbers of failures out."""

import pytest

from conveyor.contract.errors import DeclarationError
from conveyor.contract.relay_settings import OUTBOX_SOURCE
from conveyor.contract.topology import Topology
from conveyor.worker.relay import make_relay_handler
from tests.aws import Aws, FunctionEnvironment
from tests.fixtures.relay_topology import STANDARD, TOPOLOGY
from tests.lambda_context import lambda_context
from tests.unit.worker.test_relay import NO_FAILURES, charge_envelope, outbox_item, outbox_record, stream_event


@pytest.fixture
def topology() -> Topology:
    return TOPOLOGY


@pytest.fixture
def function_environment() -> FunctionEnvironment:
    """The outbox relay's environment, as its function is deployed with."""
    return lambda aws: aws.provisioned.relay_settings(OUTBOX_SOURCE).to_environment()


def test_lambda_handler_relays_the_batch(aws: Aws) -> None:
    text = charge_envelope()
    event = stream_event(outbox_record(aws, outbox_item(STANDARD, text)))
    assert make_relay_handler(TOPOLOGY)(event, lambda_context()) == NO_FAILURES
    (message,) = aws.receive(aws.queue_url(STANDARD))
    assert message["Body"] == text


def test_handler_without_its_environment_names_what_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONVEYOR_RELAY_SOURCE", OUTBOX_SOURCE)
    monkeypatch.delenv("CONVEYOR_RELAY_DLQ_URL", raising=False)
    monkeypatch.delenv("CONVEYOR_QUEUE_URLS", raising=False)
    with pytest.raises(
        DeclarationError, match="relay environment: missing CONVEYOR_RELAY_DLQ_URL, CONVEYOR_QUEUE_URLS"
    ):
        make_relay_handler(TOPOLOGY)(stream_event(), lambda_context())
