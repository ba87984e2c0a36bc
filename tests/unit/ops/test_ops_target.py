"""Finding the resources `conveyor` operates: the stack's outputs in AWS, fixed names on a local endpoint."""

import json

import boto3
import pytest

from conveyor.contract import outputs
from conveyor.local.provision import provision
from conveyor.ops.event_sources import LambdaEventSources, LocalEventSources
from conveyor.ops.target import Clients, TargetNotFoundError, local_target, stack_target
from tests.fixtures.small_topology import STACK_OUTPUTS, TOPOLOGY

STACK = "ConveyorTest"


def _deploy(stack_outputs: dict[str, str]) -> None:
    template = {
        "Resources": {"Anything": {"Type": "AWS::SQS::Queue"}},
        "Outputs": {key: {"Value": value} for key, value in stack_outputs.items()},
    }
    boto3.client("cloudformation").create_stack(StackName=STACK, TemplateBody=json.dumps(template))


def test_stack_outputs_name_every_resource(empty_aws: None) -> None:
    _deploy(STACK_OUTPUTS)
    target = stack_target(TOPOLOGY, Clients(), STACK)
    only = target.queue("only")
    assert (only.url, only.dlq_url, only.fifo) == ("https://sqs.example/only", "https://sqs.example/only-dlq", False)
    assert (target.kind, target.audit_table, target.idempotency_table, target.limits_table, target.ledger_table) == (
        "aws",
        "Conveyor-OpsAudit-ABC",
        "Conveyor-Idempotency-DEF",
        "Conveyor-Limits-GHI",
        "Conveyor-Ledger-JKL",
    )
    assert isinstance(target.event_sources, LambdaEventSources)


def test_missing_stack_and_missing_output_say_which(empty_aws: None) -> None:
    with pytest.raises(TargetNotFoundError, match=f"stack '{STACK}' not found"):
        stack_target(TOPOLOGY, Clients(), STACK)
    _deploy({key: value for key, value in STACK_OUTPUTS.items() if key != outputs.OPS_AUDIT_TABLE})
    with pytest.raises(TargetNotFoundError, match=f"no output {outputs.OPS_AUDIT_TABLE}"):
        stack_target(TOPOLOGY, Clients(), STACK)


def test_local_target_finds_what_the_local_runtime_provisioned(empty_aws: None) -> None:
    with pytest.raises(TargetNotFoundError, match="is `conveyor local up` running"):
        local_target(TOPOLOGY, Clients())
    provisioned = provision(TOPOLOGY, sqs=boto3.client("sqs"), dynamodb=boto3.client("dynamodb"))
    target = local_target(TOPOLOGY, Clients())
    assert target.queue("only").url == provisioned.queues["only"].url
    assert target.queue("only").dlq_url == provisioned.queues["only"].dlq_url
    assert (target.audit_table, target.idempotency_table, target.limits_table, target.ledger_table) == (
        provisioned.audit_table,
        provisioned.idempotency_table,
        provisioned.limits_table,
        provisioned.ledger_table,
    )
    assert isinstance(target.event_sources, LocalEventSources)
    assert target.event_sources.state("only").enabled
