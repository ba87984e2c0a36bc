"""The declared destinations deploy as a shared limits table, the operator's grant on it, two alarms
each (breaker open too long, downstream error rate) and a dashboard block; none of it without destinations."""

import json
from datetime import timedelta
from typing import Any

import pytest
from aws_cdk.assertions import Capture, Match

from conveyor.contract import outputs
from conveyor.contract.destinations import Breaker, Destination
from conveyor.worker.destinations import metrics as names
from conveyor.worker.destinations import state as limits_state
from functions.topology import TOPOLOGY
from infra.destination_monitoring import (
    ERROR_RATE_THRESHOLD,
    MIN_CALLS_FOR_ERROR_RATE,
    breaker_alarm_minutes,
)
from infra.operations import LIMITS_ACTIONS
from tests.infra.conftest import Synthesized, as_list, render

DESTINATIONS = [destination.name for destination in TOPOLOGY.destinations]
WITH_BREAKER = [destination for destination in TOPOLOGY.destinations if destination.breaker is not None]
QUEUE_NAMES = [queue.name for queue in TOPOLOGY.queues]
ERROR_RATE_PERIOD_S = 300
DESTINATION_METRICS = {names.CALLS, names.ERRORS, names.LATENCY, names.THROTTLED, names.BREAKER_OPEN}


def test_the_project_declares_destinations_with_and_without_a_breaker() -> None:
    # What the tests below cover: a destination without a breaker gets no breaker alarm.
    assert WITH_BREAKER
    assert len(WITH_BREAKER) < len(DESTINATIONS)


def dimensions(destination: str) -> list[dict[str, str]]:
    return [{"Name": names.DESTINATION_DIMENSION, "Value": destination}]


def topic(synthesized: Synthesized) -> list[dict[str, str]]:
    (topic_id,) = synthesized.template.find_resources("AWS::SNS::Topic")
    return [{"Ref": topic_id}]


def alarms(synthesized: Synthesized) -> list[dict[str, Any]]:
    return [
        resource["Properties"] for resource in synthesized.template.find_resources("AWS::CloudWatch::Alarm").values()
    ]


def destination_alarms(synthesized: Synthesized) -> list[dict[str, Any]]:
    """Alarms on any destination metric, plain or in metric math."""
    return [
        alarm
        for alarm in alarms(synthesized)
        if alarm.get("MetricName") in DESTINATION_METRICS
        or any(
            query.get("MetricStat", {}).get("Metric", {}).get("MetricName") in DESTINATION_METRICS
            for query in alarm.get("Metrics", [])
        )
    ]


def dashboard_body(synthesized: Synthesized) -> str:
    (dashboard,) = synthesized.template.find_resources("AWS::CloudWatch::Dashboard").values()
    body = dashboard["Properties"]["DashboardBody"]
    if isinstance(body, str):
        return body
    return "".join(part if isinstance(part, str) else json.dumps(part) for part in body["Fn::Join"][1])


def test_limits_table_expires_items_and_is_recoverable(synthesized: Synthesized) -> None:
    table_id = synthesized.output_ref(outputs.LIMITS_TABLE)
    # The table the stack output names is the one every worker is told about.
    assert synthesized.own_table("limits_table") == table_id
    matching = synthesized.template.find_resources(
        "AWS::DynamoDB::Table",
        {
            "Properties": Match.object_like(
                {
                    "KeySchema": [{"AttributeName": limits_state.KEY, "KeyType": "HASH"}],
                    "AttributeDefinitions": [{"AttributeName": limits_state.KEY, "AttributeType": "S"}],
                    "BillingMode": "PAY_PER_REQUEST",
                    "TimeToLiveSpecification": {"AttributeName": limits_state.EXPIRES_AT, "Enabled": True},
                    "PointInTimeRecoverySpecification": {"PointInTimeRecoveryEnabled": True},
                }
            )
        },
    )
    assert table_id in matching


@pytest.mark.parametrize("name", QUEUE_NAMES)
def test_workers_get_exactly_the_worker_actions_on_the_limits_table(synthesized: Synthesized, name: str) -> None:
    table = f"${{{synthesized.output_ref(outputs.LIMITS_TABLE)}.Arn}}"
    role_id = synthesized.properties(synthesized.of_queue(name).function)["Role"]["Fn::GetAtt"][0]
    granted = {
        action
        for statement in synthesized.role_statements(role_id)
        if table in [render(resource) for resource in as_list(statement["Resource"])]
        for action in as_list(statement["Action"])
    }
    assert granted == set(limits_state.WORKER_ACTIONS)


@pytest.mark.parametrize("destination", WITH_BREAKER, ids=lambda d: d.name)
def test_breaker_open_too_long_alarm_counts_the_declared_minutes(
    synthesized: Synthesized, destination: Destination
) -> None:
    assert destination.breaker is not None
    minutes = int(destination.breaker.alarm_after / timedelta(minutes=1))
    description = Capture()
    synthesized.template.has_resource_properties(
        "AWS::CloudWatch::Alarm",
        {
            "Namespace": "Conveyor",
            "MetricName": names.BREAKER_OPEN,
            "Dimensions": dimensions(destination.name),
            "Statistic": "Minimum",
            "Period": 60,
            "Threshold": 1,
            "ComparisonOperator": "GreaterThanOrEqualToThreshold",
            "EvaluationPeriods": minutes,
            "DatapointsToAlarm": minutes,
            "TreatMissingData": "notBreaching",
            "AlarmActions": topic(synthesized),
            "OKActions": topic(synthesized),
            "AlarmDescription": description,
        },
    )
    text = description.as_string()
    assert text.startswith(f"Destination {destination.name}:")
    assert "`conveyor limits`" in text
    assert f"`conveyor breaker close {destination.name} --reason ...`" in text


def test_only_destinations_with_a_breaker_have_a_breaker_alarm(synthesized: Synthesized) -> None:
    alarmed = [
        alarm["Dimensions"][0]["Value"]
        for alarm in alarms(synthesized)
        if alarm.get("MetricName") == names.BREAKER_OPEN
    ]
    assert sorted(alarmed) == sorted(destination.name for destination in WITH_BREAKER)


@pytest.mark.parametrize("name", DESTINATIONS)
def test_error_rate_alarm_divides_errors_by_calls_from_a_minimum(synthesized: Synthesized, name: str) -> None:
    (alarm,) = [
        a
        for a in alarms(synthesized)
        if any(
            query.get("MetricStat", {}).get("Metric", {}).get("Dimensions") == dimensions(name)
            for query in a.get("Metrics", [])
        )
    ]
    (expression,) = [query for query in alarm["Metrics"] if "Expression" in query]
    assert expression["ReturnData"] is True
    stats = {query["Id"]: query for query in alarm["Metrics"] if "MetricStat" in query}
    assert {query_id: query["MetricStat"]["Metric"]["MetricName"] for query_id, query in stats.items()} == {
        "calls": names.CALLS,
        "errors": names.ERRORS,
    }
    for query in stats.values():
        assert query["ReturnData"] is False
        assert query["MetricStat"]["Metric"]["Namespace"] == "Conveyor"
        assert query["MetricStat"]["Metric"]["Dimensions"] == dimensions(name)
        assert query["MetricStat"]["Stat"] == "Sum"
        assert query["MetricStat"]["Period"] == ERROR_RATE_PERIOD_S
    assert expression["Expression"] == f"IF(calls >= {MIN_CALLS_FOR_ERROR_RATE}, FILL(errors, 0) / calls, 0)"
    assert alarm["Threshold"] == ERROR_RATE_THRESHOLD
    assert alarm["ComparisonOperator"] == "GreaterThanThreshold"
    assert alarm["EvaluationPeriods"] == 1
    assert alarm["TreatMissingData"] == "notBreaching"
    assert alarm["AlarmActions"] == alarm["OKActions"] == topic(synthesized)
    assert alarm["AlarmDescription"].startswith(f"Destination {name}:")
    assert f"`conveyor breaker open {name} --reason ...`" in alarm["AlarmDescription"]


def test_a_few_failures_among_few_calls_do_not_page() -> None:
    # 1 failure in 2 calls is 50%, far over the threshold; the minimum is what keeps it quiet.
    assert MIN_CALLS_FOR_ERROR_RATE > 2
    assert 0 < ERROR_RATE_THRESHOLD < 1
    # At the minimum, a single failure stays under the threshold.
    assert 1 / MIN_CALLS_FOR_ERROR_RATE <= ERROR_RATE_THRESHOLD


def test_destination_alarms_are_exactly_one_error_rate_each_and_one_per_breaker(synthesized: Synthesized) -> None:
    assert len(destination_alarms(synthesized)) == len(DESTINATIONS) + len(WITH_BREAKER)


def test_operator_policy_reads_and_updates_the_limits_table_only(synthesized: Synthesized) -> None:
    (policy_id,) = synthesized.template.find_resources("AWS::IAM::ManagedPolicy")
    table = f"${{{synthesized.output_ref(outputs.LIMITS_TABLE)}.Arn}}"
    granted = {
        action
        for statement in synthesized.properties(policy_id)["PolicyDocument"]["Statement"]
        if table in [render(resource) for resource in as_list(statement["Resource"])]
        for action in as_list(statement["Action"])
    }
    assert granted == set(LIMITS_ACTIONS) == {"dynamodb:GetItem", "dynamodb:BatchGetItem", "dynamodb:UpdateItem"}


@pytest.mark.parametrize("destination", TOPOLOGY.destinations, ids=lambda d: d.name)
def test_dashboard_shows_each_destination(synthesized: Synthesized, destination: Destination) -> None:
    body = dashboard_body(synthesized)
    name = destination.name
    assert "## Destinations" in body
    assert "destinations: downstream error rate" in body
    assert f"{name} error rate" in body
    for title in ("calls and errors", "latency p95/p99", "throttled jobs"):
        assert f"{name}: {title}" in body
    assert (f"{name}: breaker open" in body) == (destination.breaker is not None)
    query = f'MetricName=\\"{names.THROTTLED}\\" destination=\\"{name}\\"'
    assert query in body


def test_no_destinations_no_alarms_and_no_dashboard_block(stream_synthesized: Synthesized) -> None:
    assert not stream_synthesized.topology.destinations
    assert destination_alarms(stream_synthesized) == []
    assert "## Destinations" not in dashboard_body(stream_synthesized)
    # The workers' limits table is there all the same: the worker's settings name it.
    assert stream_synthesized.own_table("limits_table") == stream_synthesized.output_ref(outputs.LIMITS_TABLE)


@pytest.mark.parametrize(
    ("alarm_after", "minutes"),
    [(timedelta(minutes=1), 1), (timedelta(minutes=5), 5), (timedelta(seconds=90), 2), (timedelta(days=1), 1440)],
)
def test_breaker_alarm_minutes_round_up(alarm_after: timedelta, minutes: int) -> None:
    assert breaker_alarm_minutes(Breaker(alarm_after=alarm_after)) == minutes
