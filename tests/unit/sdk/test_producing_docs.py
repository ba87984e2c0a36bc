"""The producing examples of README.md and docs/contracts.md run as written, against moto."""

from collections.abc import Iterator

import pytest

from conveyor.contract.envelope import parse_envelope
from conveyor.sdk import client_context
from tests.aws import Aws
from tests.docs_examples import python_blocks, run_blocks
from tests.unit.sdk.test_producer import drain


@pytest.fixture(autouse=True)
def fresh_process_client() -> Iterator[None]:
    """The examples build the process's client inside this test's moto, and leave none behind."""
    client_context._process_client.cache_clear()
    yield
    client_context._process_client.cache_clear()


def outbox_job_types(aws: Aws) -> list[str]:
    items = aws.dynamodb.scan(TableName="conveyor-outbox")["Items"]
    return sorted(parse_envelope(item["envelope"]["S"]).type for item in items)


def test_the_readme_produce_examples_enqueue_and_transact(aws: Aws) -> None:
    namespace = run_blocks(python_blocks("README.md", "## Produce jobs")[:2])
    (message,) = drain(aws, "critical")
    assert parse_envelope(message["Body"]).id == namespace["job_id"]
    assert aws.dynamodb.get_item(TableName="conveyor-orders", Key={"order_id": {"S": "o-1"}})["Item"]
    assert outbox_job_types(aws) == ["charge_order"]


def test_the_contracts_producing_example_runs(aws: Aws) -> None:
    namespace = run_blocks(python_blocks("docs/contracts.md", "## Producing"))
    critical = [parse_envelope(m["Body"]) for m in drain(aws, "critical")]
    default = [parse_envelope(m["Body"]) for m in drain(aws, "default")]
    assert namespace["job_id"] in {envelope.id for envelope in critical}
    assert [envelope.correlation.request_id for envelope in critical].count("req-8812") == 1
    assert len(critical) == 3
    assert sorted(envelope.data["user_id"] for envelope in default) == ["u-1", "u-2", "u-3", "u-4"]
