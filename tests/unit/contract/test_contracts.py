"""The envelope and payload contracts: what producers in any language may send, and what is refused."""

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from conveyor.contract.declarations import JobType
from conveyor.contract.envelope import Envelope, parse_envelope
from conveyor.contract.errors import ContractError, DeclarationError
from conveyor.contract.job_context import JobContext
from conveyor.contract.payloads import Payload, mask_values, sensitive, sensitive_fields, sensitive_values
from conveyor.contract.reasons import Reason
from conveyor.contract.schema import envelope_schema
from conveyor.sdk.jobs import job
from functions.jobs.charge_order import ChargeOrder, charge_order
from functions.jobs.deliver_webhook import Webhook
from functions.jobs.send_welcome_email import send_welcome_email
from functions.topology import TOPOLOGY

SCHEMA_FILE = Path(__file__).resolve().parents[3] / "docs" / "schema" / "envelope.schema.json"


def envelope(**overrides: Any) -> dict[str, Any]:
    document: dict[str, Any] = {
        "type": "charge_order",
        "v": 1,
        "id": "job-1",
        "dedupe_key": None,
        "created_at": "2026-11-29T12:00:00Z",
        "correlation": {"request_id": "r-1", "origin": "checkout", "actor": None},
        "data": {"order_id": "o-1", "amount_cents": 100, "currency": "EUR"},
    }
    document.update(overrides)
    return document


def test_unknown_top_level_fields_are_ignored_for_forward_compatibility() -> None:
    parsed = parse_envelope(json.dumps(envelope(priority="high", trace={"x": 1})))
    assert parsed.id == "job-1"
    assert "priority" not in parsed.model_dump()


def test_created_at_is_normalised_to_utc() -> None:
    parsed = parse_envelope(json.dumps(envelope(created_at="2026-11-29T14:00:00+02:00")))
    assert parsed.created_at == datetime(2026, 11, 29, 12, tzinfo=UTC)


@pytest.mark.parametrize(
    ("body", "reason", "message"),
    [
        ("{not json", Reason.INVALID_JSON, "body is not JSON"),
        ("[1, 2]", Reason.INVALID_ENVELOPE, "body is a JSON list, not an object"),
        (json.dumps(envelope(v="1")), Reason.INVALID_ENVELOPE, "v: Input should be a valid integer"),
        (json.dumps(envelope(created_at="2026-11-29T12:00:00")), Reason.INVALID_ENVELOPE, "created_at"),
        (json.dumps({k: v for k, v in envelope().items() if k != "id"}), Reason.INVALID_ENVELOPE, "id: Field required"),
        (json.dumps(envelope(data=None)), Reason.INVALID_ENVELOPE, "data: Input should be a valid dictionary"),
    ],
)
def test_malformed_envelopes_are_refused_with_their_reason(body: str, reason: Reason, message: str) -> None:
    with pytest.raises(ContractError) as raised:
        parse_envelope(body)
    assert raised.value.reason is reason
    assert message in str(raised.value)


def test_envelope_errors_do_not_echo_input_values() -> None:
    with pytest.raises(ContractError) as raised:
        parse_envelope(json.dumps(envelope(v="secret-4111")))
    assert "secret-4111" not in str(raised.value)


def test_payload_is_validated_strictly() -> None:
    with pytest.raises(ContractError) as raised:
        charge_order.load_payload({"order_id": "o-1", "amount_cents": "100", "currency": "EUR"}, 1)
    assert raised.value.reason is Reason.INVALID_PAYLOAD
    assert "amount_cents" in str(raised.value)
    with pytest.raises(ContractError, match="currency: String should match pattern"):
        charge_order.load_payload({"order_id": "o-1", "amount_cents": 100, "currency": "eur"}, 1)


def test_older_versions_are_upcast_and_unsupported_ones_refused() -> None:
    assert send_welcome_email.load_payload({"user": "u-1"}, 1).model_dump() == {"user_id": "u-1", "locale": "en"}
    assert list(send_welcome_email.supported_versions) == [1, 2]
    with pytest.raises(ContractError) as raised:
        send_welcome_email.load_payload({"user_id": "u-1"}, 3)
    assert raised.value.reason is Reason.UNSUPPORTED_VERSION
    assert "send_welcome_email v3 is not supported (supported: v1..v2)" in str(raised.value)


def test_idempotency_key_defaults_to_dedupe_key_then_id_and_may_be_a_template() -> None:
    payload = ChargeOrder(order_id="o-9", amount_cents=1, currency="EUR")
    assert charge_order.idempotency_key_for(job_id="j", dedupe_key="d", payload=payload) == "o-9#charge_v1"
    welcome = send_welcome_email.model(user_id="u")
    assert send_welcome_email.idempotency_key_for(job_id="j", dedupe_key="d", payload=welcome) == "d"
    assert send_welcome_email.idempotency_key_for(job_id="j", dedupe_key=None, payload=welcome) == "j"


class Loose(Payload):
    value: int = 0


def _noop(payload: Loose, ctx: JobContext) -> None:
    ctx.logger.debug("ran")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"model": dict}, "model must be a pydantic model"),
        ({"model": Envelope}, "model Envelope must forbid extra fields"),
        ({"version": 0}, "version must be 1 or more"),
        ({"version": 2, "upcasters": {2: dict}}, "upcasters [2] do not upgrade an older version"),
        ({"idempotency_key": "{order_id}#x"}, "names ['order_id'], not fields of Loose"),
        ({"idempotency_key": "static"}, "idempotency_key template names no payload field"),
        ({"max_payload_bytes": 2_000_000}, "max_payload_bytes must be between 1 and 1040384"),
        # SQS's own maximum leaves no room for the attributes a dead letter carries.
        ({"max_payload_bytes": 1_048_576}, "less 8192 for the attributes a dead letter carries"),
    ],
)
def test_bad_job_contract_fails_at_declaration(options: dict[str, Any], message: str) -> None:
    arguments: dict[str, Any] = {"model": Loose, **options}
    with pytest.raises(DeclarationError) as raised:
        JobType("loose", "default", handler=_noop, **arguments)
    assert str(raised.value).startswith("job type 'loose': ")
    assert message in str(raised.value)


def test_a_job_type_takes_about_ten_lines_to_declare() -> None:
    class Resize(Payload):
        image_key: str
        width: int

    @job("resize_image", queue="bulk", model=Resize, idempotency_key="{image_key}@{width}")
    def resize_image(payload: Resize, ctx: JobContext) -> None:
        ctx.logger.info("resized", extra={"key": payload.image_key})

    assert resize_image.name == "resize_image"
    assert resize_image.handler is not None
    assert (
        resize_image.idempotency_key_for(job_id="j", dedupe_key=None, payload=Resize(image_key="a", width=5)) == "a@5"
    )


def test_sensitive_fields_are_marked_and_masked() -> None:
    class Signup(Payload):
        email: str = sensitive()
        plan: str

    assert sensitive_fields(Signup) == {"email"}
    assert sensitive_fields(Webhook) == {"body"}
    values = sensitive_values(Signup, {"email": "ann@example.com", "plan": "pro"})
    assert mask_values("could not reach ann@example.com on plan pro", values) == "could not reach *** on plan pro"


def test_published_schema_is_generated_from_the_declarations() -> None:
    assert json.loads(SCHEMA_FILE.read_text()) == envelope_schema(TOPOLOGY), "run `make schema`"


def test_schema_accepts_what_the_sdk_writes_and_refuses_a_bad_payload() -> None:
    schema = envelope_schema(TOPOLOGY)
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    assert list(validator.iter_errors(envelope())) == []
    bad = envelope(data={"order_id": "o-1", "amount_cents": 0, "currency": "EUR"})
    assert [error.validator for error in validator.iter_errors(bad)] == ["exclusiveMinimum"]
    assert list(validator.iter_errors(envelope(extra_field=True))) == []
