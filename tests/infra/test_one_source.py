"""One source of truth: what the local runtime provisions equals what the stack deploys."""

import json
from typing import Any

import pytest

from conveyor.contract import outputs, relay_mapping
from conveyor.contract.relay_settings import OUTBOX_SOURCE
from conveyor.local.provision import event_source_settings, relay_dlq_attributes
from conveyor.worker import checkpoints
from functions.topology import TOPOLOGY
from tests.aws import Aws
from tests.fixtures.stream_topology import ORDERS
from tests.infra.conftest import Synthesized

QUEUE_NAMES = [queue.name for queue in TOPOLOGY.queues]
# Attributes the stack sets explicitly; SQS defaults the rest the same way in both places.
COMPARED = ("QueueName", "MessageRetentionPeriod", "VisibilityTimeout", "SqsManagedSseEnabled", "FifoQueue")


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


def _table_shape(key_schema: list[dict[str, str]], ttl: str | None, stream: str | None) -> dict[str, Any]:
    return {"key": [entry["AttributeName"] for entry in key_schema], "ttl": ttl, "stream": stream}


def deployed_tables(synthesized: Synthesized) -> list[dict[str, Any]]:
    return sorted(
        (
            _table_shape(
                table["Properties"]["KeySchema"],
                table["Properties"].get("TimeToLiveSpecification", {}).get("AttributeName"),
                table["Properties"].get("StreamSpecification", {}).get("StreamViewType"),
            )
            for table in synthesized.template.find_resources("AWS::DynamoDB::Table").values()
        ),
        key=str,
    )


def local_tables(aws: Aws) -> list[dict[str, Any]]:
    """Every table but the local stand-in for Lambda's event source mappings, which AWS keeps itself."""
    local = []
    for name in aws.dynamodb.list_tables()["TableNames"]:
        if name == aws.provisioned.event_sources_table:
            continue
        ttl = aws.dynamodb.describe_time_to_live(TableName=name)["TimeToLiveDescription"]
        table = aws.dynamodb.describe_table(TableName=name)["Table"]
        stream = table.get("StreamSpecification", {})
        local.append(
            _table_shape(
                table["KeySchema"],
                ttl.get("AttributeName") if ttl.get("TimeToLiveStatus") == "ENABLED" else None,
                stream.get("StreamViewType") if stream.get("StreamEnabled") else None,
            )
        )
    return sorted(local, key=str)


def test_local_tables_match_the_stack(synthesized: Synthesized, aws: Aws) -> None:
    """Key, TTL and stream of every table, the outbox's included."""
    assert local_tables(aws) == deployed_tables(synthesized)


def test_local_outbox_table_matches_the_stack(synthesized: Synthesized, aws: Aws) -> None:
    deployed = synthesized.properties(synthesized.output_ref(outputs.OUTBOX_TABLE))
    local = aws.dynamodb.describe_table(TableName=aws.provisioned.outbox_table)["Table"]
    assert local["KeySchema"] == deployed["KeySchema"]
    assert local["AttributeDefinitions"] == deployed["AttributeDefinitions"]
    assert local["StreamSpecification"] == {"StreamEnabled": True, **deployed["StreamSpecification"]}
    ttl = aws.dynamodb.describe_time_to_live(TableName=aws.provisioned.outbox_table)["TimeToLiveDescription"]
    assert {"AttributeName": ttl["AttributeName"], "Enabled": ttl["TimeToLiveStatus"] == "ENABLED"} == deployed[
        "TimeToLiveSpecification"
    ]


def test_local_relay_dlq_matches_the_stack(synthesized: Synthesized, aws: Aws) -> None:
    deployed = synthesized.properties(synthesized.output_ref(outputs.RELAY_DLQ_URL))
    assert _provisioned(aws, aws.provisioned.relay_dlq_url) == _synthesized(deployed)
    assert relay_dlq_attributes() == {
        "MessageRetentionPeriod": str(deployed["MessageRetentionPeriod"]),
        "SqsManagedSseEnabled": "true",
    }


@pytest.mark.parametrize("source", [OUTBOX_SOURCE, ORDERS.name])
def test_local_stream_poller_settings_match_the_stack(stream_synthesized: Synthesized, source: str) -> None:
    """The stream poller applies relay_mapping's settings; the stack deploys exactly those."""
    mapping = dict(stream_synthesized.properties(stream_synthesized.of_relay(source).mapping))
    deployed = {
        key: value
        for key, value in mapping.items()
        if key not in ("EventSourceArn", "FunctionName", "DestinationConfig")
    }
    deployed["FilterCriteria"] = {
        "Filters": [{"Pattern": json.loads(f["Pattern"])} for f in deployed["FilterCriteria"]["Filters"]]
    }
    assert deployed == relay_mapping.mapping_properties()


def assert_same_table(aws: Aws, local_name: str, deployed: dict[str, Any]) -> None:
    """The local table has the deployed one's key, attribute definitions and TTL."""
    local = aws.dynamodb.describe_table(TableName=local_name)["Table"]
    assert local["KeySchema"] == deployed["KeySchema"]
    assert local["AttributeDefinitions"] == deployed["AttributeDefinitions"]
    ttl = aws.dynamodb.describe_time_to_live(TableName=local_name)["TimeToLiveDescription"]
    assert {"AttributeName": ttl["AttributeName"], "Enabled": ttl["TimeToLiveStatus"] == "ENABLED"} == deployed[
        "TimeToLiveSpecification"
    ]


def test_local_audit_table_matches_the_stack(synthesized: Synthesized, aws: Aws) -> None:
    deployed = synthesized.properties(synthesized.output_ref(outputs.OPS_AUDIT_TABLE))
    assert_same_table(aws, aws.provisioned.audit_table, deployed)


def test_local_checkpoints_table_matches_the_stack(synthesized: Synthesized, aws: Aws) -> None:
    """The table the workers are told about (CONVEYOR_CHECKPOINTS_TABLE) is the one provisioned locally."""
    deployed = synthesized.properties(synthesized.table(checkpoints.KEY))
    assert_same_table(aws, aws.provisioned.checkpoints_table, deployed)


def test_local_schedule_runs_table_matches_the_stack(synthesized: Synthesized, aws: Aws) -> None:
    """The run audit the workers are told about (CONVEYOR_SCHEDULE_RUNS_TABLE), as provisioned locally."""
    deployed = synthesized.properties(synthesized.own_table("schedule_runs_table"))
    assert_same_table(aws, aws.provisioned.schedule_runs_table, deployed)


def test_local_leases_table_matches_the_stack_without_ttl(synthesized: Synthesized, aws: Aws) -> None:
    """Neither side expires lease items: a deleted item would restart its fencing token."""
    deployed = synthesized.properties(synthesized.own_table("leases_table"))
    local = aws.dynamodb.describe_table(TableName=aws.provisioned.leases_table)["Table"]
    assert local["KeySchema"] == deployed["KeySchema"]
    assert local["AttributeDefinitions"] == deployed["AttributeDefinitions"]
    assert "TimeToLiveSpecification" not in deployed
    ttl = aws.dynamodb.describe_time_to_live(TableName=aws.provisioned.leases_table)["TimeToLiveDescription"]
    assert ttl["TimeToLiveStatus"] == "DISABLED"
