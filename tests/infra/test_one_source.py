"""One source of truth: what the local runtime provisions equals what the stack deploys."""

import json
from collections.abc import Iterator
from typing import Any

import pytest

from conveyor import outputs
from conveyor.local.provision import event_source_settings
from functions.topology import TOPOLOGY
from tests.aws import Aws, moto_aws
from tests.infra.conftest import Synthesized

QUEUE_NAMES = [queue.name for queue in TOPOLOGY.queues]
# Attributes the stack sets explicitly; SQS defaults the rest the same way in both places.
COMPARED = ("QueueName", "MessageRetentionPeriod", "VisibilityTimeout", "SqsManagedSseEnabled", "FifoQueue")


@pytest.fixture(scope="module")
def aws() -> Iterator[Aws]:
    yield from moto_aws(TOPOLOGY)


def _provisioned(aws: Aws, url: str) -> dict[str, Any]:
    attributes = aws.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    return {
        "QueueName": attributes["QueueArn"].rsplit(":", 1)[1],
        "MessageRetentionPeriod": int(attributes["MessageRetentionPeriod"]),
        "VisibilityTimeout": int(attributes["VisibilityTimeout"]),
        "SqsManagedSseEnabled": attributes.get("SqsManagedSseEnabled") == "true",
        "FifoQueue": attributes.get("FifoQueue") == "true" or None,
        "maxReceiveCount": json.loads(attributes["RedrivePolicy"])["maxReceiveCount"]
        if "RedrivePolicy" in attributes
        else None,
    }


def _synthesized(properties: dict[str, Any]) -> dict[str, Any]:
    found = {key: properties.get(key) for key in COMPARED}
    found["VisibilityTimeout"] = found["VisibilityTimeout"] or 30  # SQS's default when the stack sets none
    found["maxReceiveCount"] = properties.get("RedrivePolicy", {}).get("maxReceiveCount")
    return found


@pytest.mark.parametrize("name", QUEUE_NAMES)
def test_local_queues_match_the_stack(synthesized: Synthesized, aws: Aws, name: str) -> None:
    ids = synthesized.of_queue(name)
    assert _provisioned(aws, aws.queue_url(name)) == _synthesized(synthesized.properties(ids.queue))
    assert _provisioned(aws, aws.dlq_url(name)) == _synthesized(synthesized.properties(ids.dlq))


@pytest.mark.parametrize("name", QUEUE_NAMES)
def test_local_event_source_matches_the_stack(synthesized: Synthesized, name: str) -> None:
    ids = synthesized.of_queue(name)
    (mapping,) = [
        resource["Properties"]
        for resource in synthesized.template.find_resources("AWS::Lambda::EventSourceMapping").values()
        if resource["Properties"]["FunctionName"] == {"Ref": ids.function}
    ]
    deployed = {key: value for key, value in mapping.items() if key not in ("EventSourceArn", "FunctionName")}
    assert deployed == event_source_settings(TOPOLOGY.queue(name))


def _table_shape(key_schema: list[dict[str, str]], ttl: str | None) -> dict[str, Any]:
    return {"key": [entry["AttributeName"] for entry in key_schema], "ttl": ttl}


def test_local_tables_match_the_stack(synthesized: Synthesized, aws: Aws) -> None:
    """Every table but the local stand-in for Lambda's event source mappings, which AWS keeps itself."""
    deployed = sorted(
        (
            _table_shape(
                table["Properties"]["KeySchema"],
                table["Properties"].get("TimeToLiveSpecification", {}).get("AttributeName"),
            )
            for table in synthesized.template.find_resources("AWS::DynamoDB::Table").values()
        ),
        key=str,
    )
    local = []
    for name in aws.dynamodb.list_tables()["TableNames"]:
        if name == aws.provisioned.event_sources_table:
            continue
        ttl = aws.dynamodb.describe_time_to_live(TableName=name)["TimeToLiveDescription"]
        local.append(
            _table_shape(
                aws.dynamodb.describe_table(TableName=name)["Table"]["KeySchema"],
                ttl.get("AttributeName") if ttl.get("TimeToLiveStatus") == "ENABLED" else None,
            )
        )
    assert sorted(local, key=str) == deployed


def test_local_audit_table_matches_the_stack(synthesized: Synthesized, aws: Aws) -> None:
    deployed = synthesized.properties(synthesized.output_ref(outputs.OPS_AUDIT_TABLE))
    local = aws.dynamodb.describe_table(TableName=aws.provisioned.audit_table)["Table"]
    assert local["KeySchema"] == deployed["KeySchema"]
    assert local["AttributeDefinitions"] == deployed["AttributeDefinitions"]
    ttl = aws.dynamodb.describe_time_to_live(TableName=aws.provisioned.audit_table)["TimeToLiveDescription"]
    assert {"AttributeName": ttl["AttributeName"], "Enabled": ttl["TimeToLiveStatus"] == "ENABLED"} == deployed[
        "TimeToLiveSpecification"
    ]
