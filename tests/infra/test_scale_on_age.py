"""The age controller as deployed: for the queues that scale on age only, every minute, with least privilege."""

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from aws_cdk.assertions import Capture, Match

from conveyor.contract import outputs
from conveyor.contract.scale_settings import MAPPINGS_ENV, QUEUE_NAMES_ENV
from conveyor.contract.settings import AUDIT_TABLE_ENV
from conveyor.worker.audit import WRITE_ACTIONS
from functions.topology import TOPOLOGY
from infra.scale_on_age import (
    FAILED_RUNS_EVALUATION_PERIODS,
    FAILED_RUNS_TO_ALARM,
    HANDLER,
    MAPPING_ACTIONS,
    METRIC_ACTIONS,
)
from tests.infra.conftest import Synthesized, as_list, render

ROOT = Path(__file__).resolve().parents[2]
SCALED = [queue.name for queue in TOPOLOGY.queues if queue.scale_on_age]


def _controller(synthesized: Synthesized) -> tuple[str, Mapping[str, Any]]:
    (found,) = synthesized.template.find_resources(
        "AWS::Lambda::Function", {"Properties": {"Handler": HANDLER}}
    ).items()
    return found


def _mapping(synthesized: Synthesized, queue: str) -> str:
    """The logical id of the event source mapping on ``queue``'s work queue."""
    queue_id = synthesized.of_queue(queue).queue
    (logical_id,) = [
        logical_id
        for logical_id, mapping in synthesized.template.find_resources("AWS::Lambda::EventSourceMapping").items()
        if mapping["Properties"]["EventSourceArn"] == {"Fn::GetAtt": [queue_id, "Arn"]}
    ]
    return logical_id


def test_the_project_declares_a_queue_that_scales_on_age() -> None:
    assert SCALED == ["default"]


def test_the_controller_is_told_the_scaled_queues_mappings_names_and_the_audit_table(synthesized: Synthesized) -> None:
    _, function = _controller(synthesized)
    variables = function["Properties"]["Environment"]["Variables"]
    mappings, names = Capture(), Capture()
    synthesized.template.has_resource_properties(
        "AWS::Lambda::Function",
        {
            "Handler": HANDLER,
            "Environment": {"Variables": Match.object_like({MAPPINGS_ENV: mappings, QUEUE_NAMES_ENV: names})},
        },
    )
    assert render(mappings.as_object()) == '{"default": "${' + _mapping(synthesized, "default") + '}"}'
    assert render(names.as_object()) == '{"default": "${' + synthesized.of_queue("default").queue + '.QueueName}"}'
    assert variables[AUDIT_TABLE_ENV] == {"Ref": synthesized.output_ref(outputs.OPS_AUDIT_TABLE)}
    # No retry of a failed run: the next minute's run is the retry.
    synthesized.template.has_resource_properties(
        "AWS::Lambda::EventInvokeConfig",
        {"FunctionName": {"Ref": _controller(synthesized)[0]}, "MaximumRetryAttempts": 0, "Qualifier": "$LATEST"},
    )


def test_a_rule_runs_it_every_minute_without_retries(synthesized: Synthesized) -> None:
    logical_id, _ = _controller(synthesized)
    synthesized.template.has_resource_properties(
        "AWS::Events::Rule",
        {
            "ScheduleExpression": "rate(1 minute)",
            "State": "ENABLED",
            "Targets": [
                Match.object_like(
                    {"Arn": {"Fn::GetAtt": [logical_id, "Arn"]}, "RetryPolicy": {"MaximumRetryAttempts": 0}}
                )
            ],
        },
    )
    synthesized.template.has_resource_properties(
        "AWS::Lambda::Permission",
        {
            "Action": "lambda:InvokeFunction",
            "FunctionName": {"Fn::GetAtt": [logical_id, "Arn"]},
            "Principal": "events.amazonaws.com",
        },
    )


def test_its_role_resizes_only_the_scaled_queues_mappings_reads_metrics_and_adds_audit_rows(
    synthesized: Synthesized,
) -> None:
    _, function = _controller(synthesized)
    role = function["Properties"]["Role"]["Fn::GetAtt"][0]
    granted: dict[str, set[str]] = {}
    for statement in synthesized.role_statements(role):
        assert statement["Effect"] == "Allow"
        for resource in as_list(statement["Resource"]):
            granted.setdefault(render(resource), set()).update(as_list(statement["Action"]))
    mapping_arn = (
        "arn:${AWS::Partition}:lambda:${AWS::Region}:${AWS::AccountId}:event-source-mapping:${"
        + _mapping(synthesized, "default")
        + "}"
    )
    audit_arn = "${" + synthesized.output_ref(outputs.OPS_AUDIT_TABLE) + ".Arn}"
    log_group = "${" + function["Properties"]["LoggingConfig"]["LogGroup"]["Ref"] + ".Arn}"
    assert granted == {
        mapping_arn: set(MAPPING_ACTIONS),
        "*": set(METRIC_ACTIONS),
        audit_arn: set(WRITE_ACTIONS),
        log_group: {"logs:CreateLogStream", "logs:PutLogEvents"},
    }


def test_failed_runs_raise_an_alarm(synthesized: Synthesized) -> None:
    logical_id, _ = _controller(synthesized)
    actions = Capture()
    synthesized.template.has_resource_properties(
        "AWS::CloudWatch::Alarm",
        {
            "MetricName": "Errors",
            "Namespace": "AWS/Lambda",
            "Dimensions": [{"Name": "FunctionName", "Value": {"Ref": logical_id}}],
            "Threshold": 0,
            "EvaluationPeriods": FAILED_RUNS_EVALUATION_PERIODS,
            "DatapointsToAlarm": FAILED_RUNS_TO_ALARM,
            "AlarmActions": actions,
        },
    )
    assert actions.as_array() == [{"Ref": synthesized.output_ref(outputs.ALARM_TOPIC)}]


def test_scaling_bounds_outside_lambdas_range_fail_synth_with_one_line() -> None:
    environment = {**os.environ, "CONVEYOR_TOPOLOGY": "tests.fixtures.bad_scale_topology:TOPOLOGY"}
    result = subprocess.run(
        [sys.executable, "app.py"], cwd=ROOT, env=environment, capture_output=True, text=True, check=False
    )
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        "conveyor: queue 'elastic': scale_max must be between 2 and 1000 (Lambda's MaximumConcurrency range), got 2000"
    ]
