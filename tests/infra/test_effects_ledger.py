"""The effect ledger deploys as one recoverable, expiring table with a sparse pending index, which workers
write with conditional updates only and operators query and settle through that index only."""

import pytest
from aws_cdk.assertions import Capture, Match

from conveyor.contract import outputs
from conveyor.worker import effects
from functions.topology import TOPOLOGY
from infra.operations import LEDGER_ACTIONS, LEDGER_INDEX_ACTIONS
from tests.infra.conftest import Synthesized, as_list, render

QUEUE_NAMES = [queue.name for queue in TOPOLOGY.queues]


def test_ledger_table_is_recoverable_expires_items_and_has_the_sparse_pending_index(synthesized: Synthesized) -> None:
    table_id = synthesized.output_ref(outputs.LEDGER_TABLE)
    # The table the stack output names is the one every worker is told about.
    assert synthesized.own_table("ledger_table") == table_id
    indexes = Capture()
    matching = synthesized.template.find_resources(
        "AWS::DynamoDB::Table",
        {
            "Properties": Match.object_like(
                {
                    "KeySchema": [{"AttributeName": effects.KEY, "KeyType": "HASH"}],
                    "BillingMode": "PAY_PER_REQUEST",
                    "TimeToLiveSpecification": {"AttributeName": effects.EXPIRES_AT, "Enabled": True},
                    "PointInTimeRecoverySpecification": {"PointInTimeRecoveryEnabled": True},
                    "GlobalSecondaryIndexes": indexes,
                }
            )
        },
    )
    assert list(matching) == [table_id]
    assert indexes.as_array() == [
        {
            "IndexName": effects.PENDING_INDEX,
            "KeySchema": [
                {"AttributeName": effects.PENDING, "KeyType": "HASH"},
                {"AttributeName": effects.INTENDED_AT, "KeyType": "RANGE"},
            ],
            "Projection": {"ProjectionType": "ALL"},
        }
    ]
    attributes = synthesized.properties(table_id)["AttributeDefinitions"]
    assert {(a["AttributeName"], a["AttributeType"]) for a in attributes} == {
        (effects.KEY, "S"),
        (effects.PENDING, "S"),
        (effects.INTENDED_AT, "N"),
    }


def granted(statements: list[dict[str, object]], resource: str) -> set[str]:
    return {
        action
        for statement in statements
        if resource in [render(r) for r in as_list(statement["Resource"])]
        for action in as_list(statement["Action"])
    }


@pytest.mark.parametrize("name", QUEUE_NAMES)
def test_workers_only_update_the_ledger_and_never_touch_its_index(synthesized: Synthesized, name: str) -> None:
    table = f"${{{synthesized.output_ref(outputs.LEDGER_TABLE)}.Arn}}"
    role_id = synthesized.properties(synthesized.of_queue(name).function)["Role"]["Fn::GetAtt"][0]
    statements = synthesized.role_statements(role_id)
    assert granted(statements, table) == set(effects.WORKER_ACTIONS) == {"dynamodb:UpdateItem"}
    assert not [
        resource
        for statement in statements
        for resource in as_list(statement["Resource"])
        if table in render(resource) and "/index/" in render(resource)
    ]


def test_operators_query_the_pending_index_and_settle_on_the_table_only(synthesized: Synthesized) -> None:
    (policy_id,) = synthesized.template.find_resources("AWS::IAM::ManagedPolicy")
    statements = synthesized.properties(policy_id)["PolicyDocument"]["Statement"]
    table = f"${{{synthesized.output_ref(outputs.LEDGER_TABLE)}.Arn}}"
    assert granted(statements, table) == set(LEDGER_ACTIONS) == {"dynamodb:UpdateItem"}
    assert granted(statements, f"{table}/index/{effects.PENDING_INDEX}") == set(LEDGER_INDEX_ACTIONS)
    assert set(LEDGER_INDEX_ACTIONS) == {"dynamodb:Query"}
