"""cdk-nag AwsSolutions runs on every synth: the project passes, and a violation fails synth."""

import json
from pathlib import Path

import pytest
from aws_cdk import Stack
from aws_cdk import aws_sqs as sqs

from conveyor.contract.outputs import STACK_NAME
from infra.app import build_app, is_validation_failure
from tests.fixtures.small_topology import TOPOLOGY as SMALL
from tests.infra.conftest import Synthesized


def test_project_passes_aws_solutions_checks(synthesized: Synthesized) -> None:
    report = json.loads((synthesized.outdir / "validation-report.json").read_text())
    failures = [plugin for plugin in report["pluginReports"] if plugin.get("conclusion") == "failure"]
    assert failures == []


def test_acknowledgments_sit_on_the_named_policies_only_with_a_reason(synthesized: Synthesized) -> None:
    metadata = json.loads((synthesized.outdir / f"{STACK_NAME}.metadata.json").read_text())
    acknowledged = {
        path: entry["data"]
        for path, entries in metadata.items()
        for entry in entries
        if entry["type"] == "aws:cdk:acknowledged-rules"
    }
    wildcard = "AwsSolutions::AwsSolutions-IAM5[Resource::*]"
    # The workers' X-Ray writes, the relay's ListStreams and X-Ray writes, and the operator's
    # CloudWatch reads take no resource ARN.
    reasons = {
        f"/{STACK_NAME}/Queue-{q.name}/WorkerRole/DefaultPolicy": {wildcard: "X-Ray"}
        for q in synthesized.topology.queues
    }
    reasons[f"/{STACK_NAME}/Operations/OperatorPolicy"] = {wildcard: "GetMetricData"}
    relays = ["Outbox", *(f"StreamRelay-{table.name}" for table in synthesized.topology.streamed_tables())]
    for relay in relays:
        reasons[f"/{STACK_NAME}/{relay}/RelayRole/DefaultPolicy"] = {wildcard: "dynamodb:ListStreams"}
    # The relay DLQ is itself a dead-letter queue, but of event source mappings, not of a queue.
    reasons[f"/{STACK_NAME}/RelayDlq/Queue"] = {"AwsSolutions::AwsSolutions-SQS3": "on-failure destination"}
    # So is the schedules DLQ, of the Scheduler targets; it exists only when schedules are declared.
    if synthesized.topology.schedules:
        reasons[f"/{STACK_NAME}/Schedules/Dlq"] = {"AwsSolutions::AwsSolutions-SQS3": "DeadLetterConfig"}
    # The age controller reads its metric with GetMetricData; it exists only when a queue scales on age.
    if any(queue.scale_on_age for queue in synthesized.topology.queues):
        reasons[f"/{STACK_NAME}/ScaleOnAge/Role/DefaultPolicy"] = {wildcard: "GetMetricData"}
    assert set(acknowledged) == set(reasons)
    for path, rules in acknowledged.items():
        assert set(rules) == set(reasons[path])
        for rule, reason in reasons[path].items():
            assert reason in rules[rule]


def test_unacknowledged_finding_fails_synth(tmp_path: Path) -> None:
    app = build_app(SMALL, topology_spec="tests.fixtures.small_topology:TOPOLOGY", outdir=str(tmp_path))
    # A queue with no DLQ and no TLS requirement: AwsSolutions-SQS3 and SQS4.
    stack = app.node.find_child(STACK_NAME)
    assert isinstance(stack, Stack)
    sqs.Queue(stack, "Careless")
    with pytest.raises(RuntimeError) as raised:
        app.synth()
    assert is_validation_failure(raised.value)
    report = json.loads((tmp_path / "validation-report.json").read_text())
    rules = {violation["ruleName"] for plugin in report["pluginReports"] for violation in plugin["violations"]}
    assert {"AwsSolutions-SQS3", "AwsSolutions-SQS4"} <= rules
