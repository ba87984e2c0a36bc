"""JobClient.from_schema: a producer outside the project enqueues from the committed JSON Schema alone."""

import json
from pathlib import Path
from typing import Any

import pytest

from conveyor.contract.envelope import parse_envelope
from conveyor.contract.errors import DeclarationError, InvalidJobError
from conveyor.contract.schema import ROUTES_KEY, envelope_schema
from conveyor.sdk.catalog import TopologyCatalog
from conveyor.sdk.client import JobClient
from conveyor.sdk.schema_catalog import SchemaCatalog
from functions.jobs.send_welcome_email import send_welcome_email
from functions.topology import TOPOLOGY
from tests.aws import Aws
from tests.fixtures.outbox_topology import TOPOLOGY as FIFO_TOPOLOGY

SCHEMA_FILE = Path(__file__).resolve().parents[3] / "docs" / "schema" / "envelope.schema.json"


def test_a_producer_enqueues_by_name_and_dict_from_the_committed_schema(aws: Aws) -> None:
    client = JobClient.from_schema(SCHEMA_FILE, sqs_client=aws.sqs)
    job_id = client.enqueue("send_welcome_email", {"user_id": "u-7", "locale": "uk"}, dedupe_key="signup-7")
    (message,) = aws.receive(aws.queue_url("default"))
    envelope = parse_envelope(message["Body"])
    assert (envelope.id, envelope.type, envelope.v) == (job_id, "send_welcome_email", send_welcome_email.version)
    assert envelope.data == {"user_id": "u-7", "locale": "uk"}
    assert envelope.dedupe_key == "signup-7"


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ({}, "payload: 'user_id' is a required property"),
        ({"user_id": ""}, "payload: user_id: '' should be non-empty"),
        ({"user_id": 7}, "payload: user_id: 7 is not of type 'string'"),
        ({"user_id": "u-1", "coupon": "X"}, "Additional properties are not allowed ('coupon' was unexpected)"),
    ],
)
def test_a_payload_the_schema_refuses_is_not_sent(aws: Aws, payload: dict[str, Any], message: str) -> None:
    client = JobClient.from_schema(SCHEMA_FILE, sqs_client=aws.sqs)
    with pytest.raises(InvalidJobError, match=r"^job 0 \(send_welcome_email\): ") as raised:
        client.enqueue("send_welcome_email", payload)
    assert message in str(raised.value)
    assert aws.receive(aws.queue_url("default")) == []


@pytest.mark.parametrize(
    "payload",
    [
        {"user_id": "u-1"},
        {"user_id": "u-1", "locale": "de"},
        {},
        {"user_id": ""},
        {"user_id": 7},
        {"user_id": None},
        {"user_id": "u-1", "coupon": "X"},
        {"user_id": "u-1", "locale": ["en"]},
    ],
)
def test_the_schema_accepts_and_refuses_what_the_payload_model_does(payload: dict[str, Any]) -> None:
    """The same judgement inside the project (pydantic) and outside it (the schema): no surprise at the worker."""
    verdicts = []
    for catalog in (TopologyCatalog(TOPOLOGY), SchemaCatalog(SCHEMA_FILE)):
        route = catalog.route("send_welcome_email")
        try:
            catalog.payload(route, payload, "job 0")
        except InvalidJobError:
            verdicts.append("refused")
        else:
            verdicts.append("accepted")
    assert verdicts[0] == verdicts[1], verdicts


def test_an_unknown_job_type_names_the_declared_ones(aws: Aws) -> None:
    client = JobClient.from_schema(SCHEMA_FILE, sqs_client=aws.sqs)
    with pytest.raises(InvalidJobError, match="unknown job type 'send_invoice'; the schema declares charge_order, "):
        client.enqueue("send_invoice", {})


def test_routes_follow_the_declarations_fifo_included() -> None:
    catalog = SchemaCatalog(envelope_schema(FIFO_TOPOLOGY))
    route = catalog.route("post_ledger")
    assert (route.queue, route.fifo) == ("ledger", True)
    assert (
        catalog.route("attach_receipt").max_payload_bytes == FIFO_TOPOLOGY.job_type("attach_receipt").max_payload_bytes
    )
    client = JobClient.from_schema(envelope_schema(FIFO_TOPOLOGY))
    with pytest.raises(InvalidJobError, match="queue 'ledger' is FIFO; pass group="):
        client.enqueue("post_ledger", {"account": "a-1", "amount_cents": 5})


def test_a_schema_without_routes_or_unreadable_fails_in_one_line(tmp_path: Path) -> None:
    document = json.loads(SCHEMA_FILE.read_text())
    del document[ROUTES_KEY]
    with pytest.raises(DeclarationError, match="no 'x-conveyor' routes; regenerate it with `conveyor schema`"):
        JobClient.from_schema(document)
    with pytest.raises(DeclarationError, match="cannot read the schema"):
        JobClient.from_schema(tmp_path / "missing.json")
    (tmp_path / "broken.json").write_text("{")
    with pytest.raises(DeclarationError, match=r"broken\.json: not JSON"):
        JobClient.from_schema(tmp_path / "broken.json")
