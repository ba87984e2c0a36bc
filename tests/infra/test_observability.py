"""The stack's dashboard and the alarms on what users feel, with thresholds from the declarations."""

import json
from typing import Any

import pytest

from functions.topology import TOPOLOGY
from infra.queue_monitoring import SATURATION_MINUTES, SATURATION_SHARE
from tests.infra.conftest import Synthesized

JOBS = [(job.queue, job.name) for job in TOPOLOGY.job_types]
QUEUE_NAMES = [queue.name for queue in TOPOLOGY.queues]


def alarms(synthesized: Synthesized) -> list[dict[str, Any]]:
    return [
        resource["Properties"] for resource in synthesized.template.find_resources("AWS::CloudWatch::Alarm").values()
    ]


def job_dimensions(queue: str, job_type: str) -> list[dict[str, str]]:
    return [{"Name": "job_type", "Value": job_type}, {"Name": "queue", "Value": queue}]


def topic(synthesized: Synthesized) -> list[dict[str, str]]:
    (topic_id,) = synthesized.template.find_resources("AWS::SNS::Topic")
    return [{"Ref": topic_id}]


@pytest.mark.parametrize(("queue", "job_type"), JOBS)
def test_p99_end_to_end_alarm_uses_the_queues_latency_objective(
    synthesized: Synthesized, queue: str, job_type: str
) -> None:
    (alarm,) = [
        a
        for a in alarms(synthesized)
        if a.get("MetricName") == "EndToEnd" and sorted(a["Dimensions"], key=str) == job_dimensions(queue, job_type)
    ]
    assert alarm["Namespace"] == "Conveyor"
    assert alarm["ExtendedStatistic"] == "p99"
    assert alarm["Threshold"] == TOPOLOGY.queue(queue).effective_latency_objective.total_seconds() * 1000
    assert alarm["AlarmActions"] == topic(synthesized)


@pytest.mark.parametrize(("queue", "job_type"), JOBS)
def test_retry_rate_alarm_divides_retries_by_runs(synthesized: Synthesized, queue: str, job_type: str) -> None:
    candidates = [
        a
        for a in alarms(synthesized)
        if "Metrics" in a
        and any(m.get("MetricStat", {}).get("Metric", {}).get("MetricName") == "Retried" for m in a["Metrics"])
        and job_type in json.dumps(a["Metrics"])
    ]
    (alarm,) = candidates
    (expression,) = [m["Expression"] for m in alarm["Metrics"] if "Expression" in m]
    assert "FILL(retried, 0) / (FILL(ok, 0) + FILL(retried, 0) + FILL(dead, 0) + FILL(discarded, 0))" in expression
    names = {m["MetricStat"]["Metric"]["MetricName"] for m in alarm["Metrics"] if "MetricStat" in m}
    assert names == {"Succeeded", "Retried", "DeadLettered", "Discarded"}
    assert alarm["Threshold"] == TOPOLOGY.queue(queue).max_retry_rate
    assert alarm["AlarmActions"] == topic(synthesized)


@pytest.mark.parametrize(("queue", "job_type"), JOBS)
def test_any_dead_letter_alarms(synthesized: Synthesized, queue: str, job_type: str) -> None:
    (alarm,) = [
        a
        for a in alarms(synthesized)
        if a.get("MetricName") == "DeadLettered" and sorted(a["Dimensions"], key=str) == job_dimensions(queue, job_type)
    ]
    assert alarm["Threshold"] == 0
    assert alarm["ComparisonOperator"] == "GreaterThanThreshold"
    assert alarm["Statistic"] == "Sum"


@pytest.mark.parametrize("name", QUEUE_NAMES)
def test_worker_errors_throttles_and_saturation_alarm(synthesized: Synthesized, name: str) -> None:
    function = {"Name": "FunctionName", "Value": {"Ref": synthesized.of_queue(name).function}}
    by_metric = {a["MetricName"]: a for a in alarms(synthesized) if a.get("Dimensions") == [function]}
    assert by_metric["Errors"]["Threshold"] == 0
    assert by_metric["Throttles"]["Threshold"] == 0
    saturation = by_metric["ConcurrentExecutions"]
    assert saturation["Threshold"] == SATURATION_SHARE * TOPOLOGY.queue(name).max_concurrency
    assert saturation["EvaluationPeriods"] == saturation["DatapointsToAlarm"] == SATURATION_MINUTES
    assert all(alarm["AlarmActions"] == topic(synthesized) for alarm in by_metric.values())


def test_every_alarm_notifies_the_topic_on_alarm_and_recovery(synthesized: Synthesized) -> None:
    for alarm in alarms(synthesized):
        assert alarm["AlarmActions"] == topic(synthesized)
        assert alarm["OKActions"] == topic(synthesized)


def _dashboard_body(synthesized: Synthesized) -> str:
    (dashboard,) = synthesized.template.find_resources("AWS::CloudWatch::Dashboard").values()
    parts = dashboard["Properties"]["DashboardBody"]["Fn::Join"][1]
    return "".join(part if isinstance(part, str) else json.dumps(part) for part in parts)


@pytest.mark.parametrize("name", QUEUE_NAMES)
def test_dashboard_shows_each_queue_its_jobs_and_its_worker(synthesized: Synthesized, name: str) -> None:
    body = _dashboard_body(synthesized)
    assert f"## Queue `{name}`" in body
    for title in (
        "depth",
        "oldest message age (s)",
        "DLQ depth",
        "enqueue-to-done (ms)",
        "retries by reason",
        "dead letters by reason",
        "worker concurrency",
        "worker errors and throttles",
        "worker duration (ms)",
    ):
        assert f"{name}: {title}" in body
    for job_type in (job.name for job in TOPOLOGY.job_types_on(name)):
        for percentile in ("p50", "p95", "p99"):
            assert f"{job_type} {percentile}" in body
    for metric in ("Retried", "DeadLettered"):
        query = "{Conveyor,job_type,queue,reason} " + f'MetricName=\\"{metric}\\" queue=\\"{name}\\"'
        assert f"SEARCH('{query}', 'Sum', 60)" in body
