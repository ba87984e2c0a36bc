"""The stack gives the `conveyor` ops CLI an audit table, self-resuming pauses, and a least-privilege policy."""

import json
from typing import Any

from aws_cdk.assertions import Capture, Match

from conveyor.contract import outputs
from conveyor.contract.settings import AUDIT_TABLE_ENV
from conveyor.ops.audit import AUDIT_KEY, AUDIT_TTL
from conveyor.ops.event_sources import ResumeSchedules
from conveyor.worker import effects
from functions.topology import TOPOLOGY
from infra.app import PREFIX_CONTEXT, project_context
from infra.operations import LEDGER_ACTIONS, LEDGER_INDEX_ACTIONS
from infra.outbox_relay import DEDUPE_RELAY_ACTIONS
from tests.infra.conftest import Synthesized, as_list, render

QUEUE_NAMES = [queue.name for queue in TOPOLOGY.queues]
PREFIX: str = project_context()[PREFIX_CONTEXT]
SCHEDULE_GROUP = f"{PREFIX}-ops"
SCHEDULER = "scheduler.amazonaws.com"


def _granted(statements: list[dict[str, Any]]) -> dict[str, set[str]]:
    """Actions per rendered resource, however CDK merged the statements."""
    granted: dict[str, set[str]] = {}
    for statement in statements:
        assert statement["Effect"] == "Allow"
        for resource in as_list(statement["Resource"]):
            granted.setdefault(render(resource), set()).update(as_list(statement["Action"]))
    return granted


def _mapping_arns(synthesized: Synthesized) -> list[str]:
    """The workers' mappings: those that read a queue (the stream relays' are not paused by `conveyor`)."""
    mappings = {
        logical_id: mapping
        for logical_id, mapping in synthesized.template.find_resources("AWS::Lambda::EventSourceMapping").items()
        if synthesized.resources[mapping["Properties"]["EventSourceArn"]["Fn::GetAtt"][0]]["Type"] == "AWS::SQS::Queue"
    }
    assert len(mappings) == len(QUEUE_NAMES)
    return [
        f"arn:${{AWS::Partition}}:lambda:${{AWS::Region}}:${{AWS::AccountId}}:event-source-mapping:${{{logical_id}}}"
        for logical_id in mappings
    ]


def _resume_role(synthesized: Synthesized) -> str:
    """The role the stack's output names (the schedules' own roles trust Scheduler too)."""
    role_id: str = synthesized.template.to_json()["Outputs"][outputs.RESUME_SCHEDULE_ROLE]["Value"]["Fn::GetAtt"][0]
    assert synthesized.properties(role_id)["AssumeRolePolicyDocument"]["Statement"][0]["Principal"] == {
        "Service": SCHEDULER
    }
    return role_id


def _schedule_group(synthesized: Synthesized) -> str:
    (group_id,) = [
        logical_id
        for logical_id, group in synthesized.template.find_resources("AWS::Scheduler::ScheduleGroup").items()
        if group["Properties"]["Name"] == SCHEDULE_GROUP
    ]
    return group_id


def _operator_policy(synthesized: Synthesized) -> str:
    (policy_id,) = synthesized.template.find_resources("AWS::IAM::ManagedPolicy")
    return policy_id


def test_audit_table_is_keyed_expiring_recoverable_and_outlives_the_stack(synthesized: Synthesized) -> None:
    table_id = synthesized.output_ref(outputs.OPS_AUDIT_TABLE)
    resource = synthesized.resources[table_id]
    assert resource["Type"] == "AWS::DynamoDB::Table"
    assert resource["DeletionPolicy"] == "Retain"
    assert resource["UpdateReplacePolicy"] == "Retain"
    table = resource["Properties"]
    assert table["KeySchema"] == [{"AttributeName": AUDIT_KEY, "KeyType": "HASH"}]
    assert table["AttributeDefinitions"] == [{"AttributeName": AUDIT_KEY, "AttributeType": "S"}]
    assert table["TimeToLiveSpecification"] == {"AttributeName": AUDIT_TTL, "Enabled": True}
    assert table["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}
    assert table["BillingMode"] == "PAY_PER_REQUEST"
    assert table["DeletionProtectionEnabled"] is True
    # Encrypted with the AWS-managed key: no customer key whose policy the operator would need.
    assert table["SSESpecification"] == {"SSEEnabled": True}


def test_schedule_group_is_named_for_the_prefix_and_removed_with_the_stack(synthesized: Synthesized) -> None:
    group = synthesized.resources[_schedule_group(synthesized)]
    assert group["Properties"]["Name"] == SCHEDULE_GROUP
    assert group["DeletionPolicy"] == "Delete"


def test_resume_role_trusts_only_scheduler_for_this_accounts_ops_group(synthesized: Synthesized) -> None:
    role = synthesized.properties(_resume_role(synthesized))
    assert role["AssumeRolePolicyDocument"]["Statement"] == [
        {
            "Action": "sts:AssumeRole",
            "Effect": "Allow",
            "Principal": {"Service": SCHEDULER},
            "Condition": {
                "StringEquals": {
                    "aws:SourceAccount": {"Ref": "AWS::AccountId"},
                    "aws:SourceArn": {"Fn::GetAtt": [_schedule_group(synthesized), "Arn"]},
                }
            },
        }
    ]


def _statements_of(synthesized: Synthesized, role_id: str) -> list[dict[str, Any]]:
    return [
        statement
        for policy in synthesized.template.find_resources("AWS::IAM::Policy").values()
        if {"Ref": role_id} in policy["Properties"]["Roles"]
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
    ]


def _resume_function(synthesized: Synthesized) -> str:
    function_id: str = synthesized.template.to_json()["Outputs"][outputs.RESUME_FUNCTION]["Value"]["Fn::GetAtt"][0]
    return function_id


def test_resume_role_can_only_invoke_the_timed_resume_function(synthesized: Synthesized) -> None:
    role_id = _resume_role(synthesized)
    role = synthesized.properties(role_id)
    assert "ManagedPolicyArns" not in role
    assert "Policies" not in role
    statements = _statements_of(synthesized, role_id)
    assert not [statement for statement in statements if "Condition" in statement]
    function_arn = f"${{{_resume_function(synthesized)}.Arn}}"
    assert _granted(statements) == {function_arn: {"lambda:InvokeFunction"}}


def test_timed_resume_function_enables_the_mappings_and_writes_audit_rows_only(synthesized: Synthesized) -> None:
    function_id = _resume_function(synthesized)
    function = synthesized.properties(function_id)
    assert function["Handler"] == "functions.timed_resume.handler"
    audit = Capture()
    synthesized.template.has_resource_properties(
        "AWS::Lambda::Function",
        Match.object_like(
            {
                "Handler": "functions.timed_resume.handler",
                "Environment": {"Variables": Match.object_like({AUDIT_TABLE_ENV: {"Ref": audit}})},
            }
        ),
    )
    assert audit.as_string() == synthesized.output_ref(outputs.OPS_AUDIT_TABLE)
    role_id = function["Role"]["Fn::GetAtt"][0]
    granted = _granted(_statements_of(synthesized, role_id))
    assert {arn: granted.pop(arn) for arn in _mapping_arns(synthesized)} == {
        arn: {"lambda:UpdateEventSourceMapping"} for arn in _mapping_arns(synthesized)
    }
    assert granted.pop(f"${{{audit.as_string()}.Arn}}") == {"dynamodb:PutItem"}
    # What is left: writing its own logs.
    assert all(action.startswith("logs:") for actions in granted.values() for action in actions)


def test_operator_policy_grants_exactly_what_jobs_needs(synthesized: Synthesized) -> None:
    policy = synthesized.properties(_operator_policy(synthesized))
    assert policy["ManagedPolicyName"] == f"{PREFIX}-operator"
    statements = policy["PolicyDocument"]["Statement"]
    queue_actions = {
        "sqs:GetQueueAttributes",
        "sqs:GetQueueUrl",
        "sqs:ReceiveMessage",
        "sqs:DeleteMessage",
        "sqs:ChangeMessageVisibility",
        "sqs:SendMessage",
    }
    # The exact names a timed pause gives its schedule, so no other schedule can be touched.
    schedules = ResumeSchedules(group=SCHEDULE_GROUP, role_arn="unused", prefix=PREFIX, function_arn="unused")
    expected: dict[str, set[str]] = {
        "${AWS::StackId}": {"cloudformation:DescribeStacks"},
        f"${{{_resume_role(synthesized)}.Arn}}": {"iam:PassRole"},
        f"${{{synthesized.output_ref(outputs.OPS_AUDIT_TABLE)}.Arn}}": {"dynamodb:PutItem", "dynamodb:Scan"},
        f"${{{synthesized.own_table('idempotency_table')}.Arn}}": {"dynamodb:GetItem"},
        # `conveyor limits` reads the destinations' state; `limits set` and `breaker open|close` update it.
        f"${{{synthesized.output_ref(outputs.LIMITS_TABLE)}.Arn}}": {
            "dynamodb:GetItem",
            "dynamodb:BatchGetItem",
            "dynamodb:UpdateItem",
        },
        # `conveyor reconcile` reads the effect ledger's pending index and settles what it finds.
        f"${{{synthesized.output_ref(outputs.LEDGER_TABLE)}.Arn}}": set(LEDGER_ACTIONS),
        f"${{{synthesized.output_ref(outputs.LEDGER_TABLE)}.Arn}}/index/{effects.PENDING_INDEX}": set(
            LEDGER_INDEX_ACTIONS
        ),
        # CloudWatch reads have no resource-level permissions; the only wildcard.
        "*": {"cloudwatch:GetMetricData", "cloudwatch:GetMetricStatistics"},
    }
    # `conveyor dlq ... relay|schedules` reads, redrives and discards the relay's and the schedules' DLQs,
    # and a relay redrive claims its jobs' dedupe keys as the relay does.
    expected[f"${{{synthesized.output_ref(outputs.RELAY_DLQ_URL)}.Arn}}"] = queue_actions
    expected[f"${{{synthesized.output_ref(outputs.SCHEDULES_DLQ_URL)}.Arn}}"] = queue_actions
    expected[f"${{{synthesized.output_ref(outputs.DEDUPE_TABLE)}.Arn}}"] = set(DEDUPE_RELAY_ACTIONS)
    for name in QUEUE_NAMES:
        ids = synthesized.of_queue(name)
        expected[f"${{{ids.queue}.Arn}}"] = queue_actions
        expected[f"${{{ids.dlq}.Arn}}"] = queue_actions
        # `conveyor tail` reads each worker's own log group, and no other.
        log_group = synthesized.properties(ids.function)["LoggingConfig"]["LogGroup"]["Ref"]
        expected[f"${{{log_group}.Arn}}"] = {"logs:FilterLogEvents"}
        schedule = f"schedule/{SCHEDULE_GROUP}/{schedules.name(name)}"
        expected[f"arn:${{AWS::Partition}}:scheduler:${{AWS::Region}}:${{AWS::AccountId}}:{schedule}"] = {
            "scheduler:CreateSchedule",
            "scheduler:GetSchedule",
            "scheduler:DeleteSchedule",
        }
    for arn in _mapping_arns(synthesized):
        expected[arn] = {"lambda:GetEventSourceMapping", "lambda:UpdateEventSourceMapping"}
    assert _granted(statements) == expected
    # The resume role can be passed to EventBridge Scheduler and to nothing else.
    assert [statement["Condition"] for statement in statements if "Condition" in statement] == [
        {"StringEquals": {"iam:PassedToService": SCHEDULER}}
    ]
    (pass_role,) = [statement for statement in statements if "Condition" in statement]
    assert pass_role["Action"] == "iam:PassRole"


def test_operator_policy_wildcard_is_acknowledged_with_a_reason(synthesized: Synthesized) -> None:
    metadata = json.loads((synthesized.outdir / f"{outputs.STACK_NAME}.metadata.json").read_text())
    (acknowledged,) = [
        entry["data"]
        for entry in metadata[f"/{outputs.STACK_NAME}/Operations/OperatorPolicy"]
        if entry["type"] == "aws:cdk:acknowledged-rules"
    ]
    assert list(acknowledged) == ["AwsSolutions::AwsSolutions-IAM5[Resource::*]"]
    assert "GetMetricData" in acknowledged["AwsSolutions::AwsSolutions-IAM5[Resource::*]"]


def test_outputs_let_jobs_find_the_operations_resources(synthesized: Synthesized) -> None:
    stack_outputs = synthesized.template.to_json()["Outputs"]
    audit = synthesized.properties(synthesized.output_ref(outputs.OPS_AUDIT_TABLE))
    assert audit["KeySchema"] == [{"AttributeName": AUDIT_KEY, "KeyType": "HASH"}]
    assert stack_outputs[outputs.RESUME_SCHEDULE_GROUP]["Value"] == SCHEDULE_GROUP
    assert stack_outputs[outputs.RESUME_SCHEDULE_ROLE]["Value"] == {"Fn::GetAtt": [_resume_role(synthesized), "Arn"]}
    assert synthesized.output_ref(outputs.OPERATOR_POLICY) == _operator_policy(synthesized)
    # The CLI names its resume schedules with the deployed prefix, which the operator policy allows.
    assert stack_outputs[outputs.PREFIX]["Value"] == SCHEDULE_GROUP.removesuffix("-ops")
