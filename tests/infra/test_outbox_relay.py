"""The stream relays as deployed: the outbox table, each relay's mapping, role, environment and alarms.

``synthesized`` is the project's app (the outbox relay, and one for ``orders``, which its stream
rule reads); ``stream_synthesized`` has a stream rule on ``orders`` and a table no rule reads.
"""

import json
from datetime import timedelta
from typing import Any, cast

import pytest
from aws_cdk import App, Stack
from aws_cdk.assertions import Match

from conveyor.contract import limits, naming, outputs, relay_mapping
from conveyor.contract.loader import TOPOLOGY_ENV
from conveyor.contract.relay_settings import DEDUPE_TABLE_ENV, OUTBOX_SOURCE, RelaySettings
from conveyor.sdk import dedupe, outbox
from functions.orders import ORDERS_TABLE as PROJECT_ORDERS
from infra.app import LOG_RETENTION_CONTEXT, PREFIX_CONTEXT, project_context
from infra.outbox_relay import (
    DEDUPE_ENQUEUE_ACTIONS,
    DEDUPE_RELAY_ACTIONS,
    HANDLER,
    ITERATOR_AGE_DATAPOINTS_TO_ALARM,
    ITERATOR_AGE_EVALUATION_PERIODS,
    ITERATOR_AGE_THRESHOLD,
    OutboxRelay,
)
from tests.fixtures.stream_topology import NOTES, ORDERS
from tests.infra.conftest import STREAM_TOPOLOGY_SPEC, Synthesized, as_list, render

PREFIX: str = project_context()[PREFIX_CONTEXT]
# DynamoDB Streams keeps a record 24 hours: a maximum record age must sit inside it.
STREAM_RETENTION = timedelta(hours=24)
ONE_MONTH_DAYS = 30
STREAM_READ = {"dynamodb:DescribeStream", "dynamodb:GetRecords", "dynamodb:GetShardIterator"}
QUEUE_SEND = {"sqs:SendMessage", "sqs:GetQueueAttributes", "sqs:GetQueueUrl"}


def _outbox_table(synthesized: Synthesized) -> str:
    return synthesized.output_ref(outputs.OUTBOX_TABLE)


def _dedupe_table(synthesized: Synthesized) -> str:
    return synthesized.output_ref(outputs.DEDUPE_TABLE)


def _relay_dlq(synthesized: Synthesized) -> str:
    return synthesized.output_ref(outputs.RELAY_DLQ_URL)


def _topic(synthesized: Synthesized) -> list[dict[str, str]]:
    (topic_id,) = synthesized.template.find_resources("AWS::SNS::Topic")
    return [{"Ref": topic_id}]


def test_outbox_table_is_keyed_by_job_id_expires_and_streams_new_images(synthesized: Synthesized) -> None:
    table = synthesized.properties(_outbox_table(synthesized))
    assert table["KeySchema"] == [{"AttributeName": outbox.KEY, "KeyType": "HASH"}]
    assert table["AttributeDefinitions"] == [{"AttributeName": outbox.KEY, "AttributeType": "S"}]
    assert table["TimeToLiveSpecification"] == {"AttributeName": outbox.EXPIRES_AT, "Enabled": True}
    assert table["StreamSpecification"] == {"StreamViewType": "NEW_IMAGE"}
    assert table["BillingMode"] == "PAY_PER_REQUEST"
    assert table["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}


def test_only_tables_a_stream_rule_reads_have_a_stream(stream_synthesized: Synthesized) -> None:
    by_key = {
        table["Properties"]["KeySchema"][0]["AttributeName"]: table["Properties"]
        for table in stream_synthesized.template.find_resources("AWS::DynamoDB::Table").values()
    }
    assert by_key[ORDERS.key]["StreamSpecification"] == {"StreamViewType": "NEW_IMAGE"}
    assert "StreamSpecification" not in by_key[NOTES.key]
    assert stream_synthesized.relay_sources() == {OUTBOX_SOURCE, ORDERS.name}


def test_project_relays_the_outbox_and_the_table_its_stream_rule_reads(synthesized: Synthesized) -> None:
    assert synthesized.topology.streamed_tables() == (PROJECT_ORDERS,)
    assert synthesized.relay_sources() == {OUTBOX_SOURCE, PROJECT_ORDERS.name}
    streams = {
        logical_id
        for logical_id, table in synthesized.template.find_resources("AWS::DynamoDB::Table").items()
        if "StreamSpecification" in table["Properties"]
    }
    assert streams == {_outbox_table(synthesized), synthesized.table(PROJECT_ORDERS.key)}


@pytest.mark.parametrize("source", [OUTBOX_SOURCE, ORDERS.name])
def test_mapping_relays_inserts_only_and_never_blocks_its_shard(stream_synthesized: Synthesized, source: str) -> None:
    ids = stream_synthesized.of_relay(source)
    mapping = stream_synthesized.properties(ids.mapping)
    (pattern,) = mapping["FilterCriteria"]["Filters"]
    assert json.loads(pattern["Pattern"]) == {"eventName": ["INSERT"]}
    assert mapping["BisectBatchOnFunctionError"] is True
    # Lambda's defaults are -1 (infinite) for both: one bad record would hold the shard for a day.
    assert 0 <= mapping["MaximumRetryAttempts"] == relay_mapping.MAX_RETRY_ATTEMPTS
    assert 60 <= mapping["MaximumRecordAgeInSeconds"] < STREAM_RETENTION.total_seconds()
    assert mapping["DestinationConfig"] == {
        "OnFailure": {"Destination": {"Fn::GetAtt": [_relay_dlq(stream_synthesized), "Arn"]}}
    }
    assert mapping["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert mapping["StartingPosition"] == "TRIM_HORIZON"
    assert mapping["ParallelizationFactor"] == 1
    assert mapping["BatchSize"] == relay_mapping.BATCH_SIZE


def test_each_relay_reads_its_own_tables_stream(stream_synthesized: Synthesized) -> None:
    outbox_relay = stream_synthesized.of_relay(OUTBOX_SOURCE)
    orders_relay = stream_synthesized.of_relay(ORDERS.name)
    assert outbox_relay.table == _outbox_table(stream_synthesized)
    assert stream_synthesized.properties(orders_relay.table)["KeySchema"][0]["AttributeName"] == ORDERS.key
    for ids in (outbox_relay, orders_relay):
        assert stream_synthesized.properties(ids.mapping)["EventSourceArn"] == {"Fn::GetAtt": [ids.table, "StreamArn"]}
        assert ids.dlq == _relay_dlq(stream_synthesized)


def _granted(synthesized: Synthesized, role_id: str) -> dict[str, set[str]]:
    granted: dict[str, set[str]] = {}
    for statement in synthesized.role_statements(role_id):
        assert statement["Effect"] == "Allow"
        assert "Condition" not in statement
        for resource in as_list(statement["Resource"]):
            granted.setdefault(render(resource), set()).update(as_list(statement["Action"]))
    return granted


@pytest.mark.parametrize("source", [OUTBOX_SOURCE, ORDERS.name])
def test_relay_role_reads_its_stream_and_sends_to_the_work_queues_and_relay_dlq_only(
    stream_synthesized: Synthesized, source: str
) -> None:
    ids = stream_synthesized.of_relay(source)
    assert "ManagedPolicyArns" not in stream_synthesized.properties(ids.role)
    expected = {
        f"${{{ids.log_group}.Arn}}": {"logs:CreateLogStream", "logs:PutLogEvents"},
        # No resource-level permissions for these: the only wildcard, acknowledged for cdk-nag.
        "*": {"dynamodb:ListStreams", "xray:PutTraceSegments", "xray:PutTelemetryRecords"},
        f"${{{ids.table}.StreamArn}}": STREAM_READ,
        f"${{{_relay_dlq(stream_synthesized)}.Arn}}": QUEUE_SEND,
        # A relayed job with a dedupe key claims it (conveyor.sdk.dedupe).
        f"${{{_dedupe_table(stream_synthesized)}.Arn}}": set(DEDUPE_RELAY_ACTIONS),
    }
    # Every declared work queue, FIFO included; none of their DLQs.
    for queue in stream_synthesized.topology.queues:
        expected[f"${{{stream_synthesized.of_queue(queue.name).queue}.Arn}}"] = QUEUE_SEND
    assert any(queue.fifo for queue in stream_synthesized.topology.queues)
    assert _granted(stream_synthesized, ids.role) == expected


@pytest.mark.parametrize("source", [OUTBOX_SOURCE, ORDERS.name])
def test_relay_environment_names_its_source_the_relay_dlq_and_every_queue(
    stream_synthesized: Synthesized, source: str
) -> None:
    ids = stream_synthesized.of_relay(source)
    variables = stream_synthesized.properties(ids.function)["Environment"]["Variables"]
    settings = RelaySettings.from_environment({name: render(value) for name, value in variables.items()})
    assert settings.source == source
    assert variables[TOPOLOGY_ENV] == STREAM_TOPOLOGY_SPEC
    assert settings.dlq_url == f"${{{_relay_dlq(stream_synthesized)}}}"
    assert settings.dedupe_table == f"${{{_dedupe_table(stream_synthesized)}}}"
    assert settings.queue_urls == {
        queue.name: f"${{{stream_synthesized.of_queue(queue.name).queue}}}"
        for queue in stream_synthesized.topology.queues
    }


def test_relay_runs_like_the_workers(synthesized: Synthesized) -> None:
    ids = synthesized.of_relay(OUTBOX_SOURCE)
    relay = synthesized.properties(ids.function)
    worker = synthesized.properties(synthesized.of_queue(synthesized.topology.queues[0].name).function)
    assert relay["Handler"] == HANDLER == "functions.relay.handler"
    for same in ("Runtime", "Architectures", "Layers", "TracingConfig", "Code"):
        assert relay[same] == worker[same], same
    assert relay["Timeout"] == 60
    assert project_context()[LOG_RETENTION_CONTEXT] == "ONE_MONTH"
    assert synthesized.properties(ids.log_group)["RetentionInDays"] == ONE_MONTH_DAYS


@pytest.mark.parametrize("source", [OUTBOX_SOURCE, ORDERS.name])
def test_iterator_age_alarm_pages_when_a_relay_falls_behind(stream_synthesized: Synthesized, source: str) -> None:
    function = stream_synthesized.of_relay(source).function
    stream_synthesized.template.has_resource_properties(
        "AWS::CloudWatch::Alarm",
        {
            "Namespace": "AWS/Lambda",
            "MetricName": "IteratorAge",
            "Dimensions": [{"Name": "FunctionName", "Value": {"Ref": function}}],
            "Statistic": "Maximum",
            "Period": 60,
            # IteratorAge is in milliseconds.
            "Threshold": ITERATOR_AGE_THRESHOLD.total_seconds() * 1000,
            "ComparisonOperator": "GreaterThanThreshold",
            "EvaluationPeriods": ITERATOR_AGE_EVALUATION_PERIODS,
            "DatapointsToAlarm": ITERATOR_AGE_DATAPOINTS_TO_ALARM,
            "TreatMissingData": "notBreaching",
            "AlarmActions": _topic(stream_synthesized),
            "OKActions": _topic(stream_synthesized),
        },
    )


def test_relay_dlq_alarm_fires_on_the_first_record(synthesized: Synthesized) -> None:
    synthesized.template.has_resource_properties(
        "AWS::CloudWatch::Alarm",
        {
            "Namespace": "AWS/SQS",
            "MetricName": "ApproximateNumberOfMessagesVisible",
            "Dimensions": [{"Name": "QueueName", "Value": {"Fn::GetAtt": [_relay_dlq(synthesized), "QueueName"]}}],
            "Threshold": 0,
            "ComparisonOperator": "GreaterThanThreshold",
            "EvaluationPeriods": 1,
            "TreatMissingData": "notBreaching",
            "AlarmActions": _topic(synthesized),
            "OKActions": _topic(synthesized),
        },
    )


def test_one_relay_dlq_encrypted_tls_only_with_the_longest_retention(stream_synthesized: Synthesized) -> None:
    dlq_id = _relay_dlq(stream_synthesized)
    dlq = stream_synthesized.properties(dlq_id)
    assert dlq["QueueName"] == naming.queue_name(naming.RELAY_DLQ, prefix=PREFIX)
    assert dlq["SqsManagedSseEnabled"] is True
    assert dlq["MessageRetentionPeriod"] == int(limits.SQS_MAX_RETENTION.total_seconds())
    assert "FifoQueue" not in dlq  # Lambda's on-failure destination must be a standard queue
    stream_synthesized.template.has_resource_properties(
        "AWS::SQS::QueuePolicy",
        {
            "Queues": [{"Ref": dlq_id}],
            "PolicyDocument": {
                "Statement": Match.array_with(
                    [Match.object_like({"Effect": "Deny", "Condition": {"Bool": {"aws:SecureTransport": "false"}}})]
                )
            },
        },
    )
    relays = [stream_synthesized.of_relay(source) for source in stream_synthesized.relay_sources()]
    assert {relay.dlq for relay in relays} == {dlq_id}


def test_outputs_name_the_outbox_table_and_the_relay_dlq(synthesized: Synthesized) -> None:
    assert synthesized.resources[_outbox_table(synthesized)]["Type"] == "AWS::DynamoDB::Table"
    assert synthesized.resources[_relay_dlq(synthesized)]["Type"] == "AWS::SQS::Queue"
    assert synthesized.of_relay(OUTBOX_SOURCE).table == _outbox_table(synthesized)


def test_every_worker_can_enqueue_through_the_outbox(synthesized: Synthesized) -> None:
    """Jobs may enqueue follow-up jobs atomically with their writes, with dedupe keys: the tables' names and writes."""
    outbox_id, dedupe_id = _outbox_table(synthesized), _dedupe_table(synthesized)
    for queue in synthesized.topology.queues:
        ids = synthesized.of_queue(queue.name)
        function = synthesized.properties(ids.function)
        assert function["Environment"]["Variables"][outbox.OUTBOX_TABLE_ENV] == {"Ref": outbox_id}
        assert function["Environment"]["Variables"][DEDUPE_TABLE_ENV] == {"Ref": dedupe_id}
        granted = _granted(synthesized, function["Role"]["Fn::GetAtt"][0])
        assert granted[f"${{{outbox_id}.Arn}}"] == {"dynamodb:PutItem"}
        assert granted[f"${{{dedupe_id}.Arn}}"] == set(DEDUPE_ENQUEUE_ACTIONS)


def test_the_dedupe_table_expires_its_keys_and_is_named_in_an_output(synthesized: Synthesized) -> None:
    table = synthesized.properties(_dedupe_table(synthesized))
    # The name the SDK defaults to, so a producer outside the stack finds it as it finds a queue.
    assert table["TableName"] == naming.table_name(naming.DEDUPE_TABLE, prefix=PREFIX)
    assert table["KeySchema"] == [{"AttributeName": dedupe.KEY, "KeyType": "HASH"}]
    assert table["TimeToLiveSpecification"] == {"AttributeName": dedupe.EXPIRES_AT, "Enabled": True}
    assert table["BillingMode"] == "PAY_PER_REQUEST"
    assert table["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}


def test_stream_relays_pass_aws_solutions_checks_with_named_acknowledgments(
    stream_synthesized: Synthesized,
) -> None:
    report = json.loads((stream_synthesized.outdir / "validation-report.json").read_text())
    assert [plugin for plugin in report["pluginReports"] if plugin.get("conclusion") == "failure"] == []
    metadata = json.loads((stream_synthesized.outdir / f"{outputs.STACK_NAME}.metadata.json").read_text())
    acknowledged = {
        path: set(entry["data"])
        for path, entries in metadata.items()
        for entry in entries
        if entry["type"] == "aws:cdk:acknowledged-rules" and "Queue-" not in path and "Operations" not in path
    }
    stack = outputs.STACK_NAME
    assert acknowledged == {
        f"/{stack}/Outbox/RelayRole/DefaultPolicy": {"AwsSolutions::AwsSolutions-IAM5[Resource::*]"},
        f"/{stack}/StreamRelay-{ORDERS.name}/RelayRole/DefaultPolicy": {"AwsSolutions::AwsSolutions-IAM5[Resource::*]"},
        f"/{stack}/RelayDlq/Queue": {"AwsSolutions::AwsSolutions-SQS3"},
    }


def test_dashboard_shows_the_relays_and_their_dlq(stream_synthesized: Synthesized) -> None:
    (dashboard,) = stream_synthesized.template.find_resources("AWS::CloudWatch::Dashboard").values()
    body = render(dashboard["Properties"]["DashboardBody"])
    for title in ("## Stream relays", "relays: iterator age (ms)", "relays: errors", "relay DLQ depth"):
        assert title in body
    for source in (OUTBOX_SOURCE, ORDERS.name):
        assert f"${{{stream_synthesized.of_relay(source).function}}}" in body


def test_dashboard_graphs_what_each_relay_relayed_poisoned_and_gave_back(stream_synthesized: Synthesized) -> None:
    (dashboard,) = stream_synthesized.template.find_resources("AWS::CloudWatch::Dashboard").values()
    widgets = json.loads(render(dashboard["Properties"]["DashboardBody"]))["widgets"]
    graphs = {widget["properties"].get("title"): widget["properties"] for widget in widgets}
    for title, metric in (
        ("relays: jobs relayed", "Relayed"),
        ("relays: duplicate enqueues absorbed", "RelayDeduplicated"),
        ("relays: poison records dead-lettered", "RelayPoisoned"),
        ("relays: records given back to retry", "RelayFailed"),
    ):
        # The relay's EMF metric, per source, summed per minute: [namespace, name, dimension, value, options].
        lines = graphs[title]["metrics"]
        assert [line[:4] for line in lines] == [
            ["Conveyor", metric, "source", source] for source in (OUTBOX_SOURCE, ORDERS.name)
        ]
        assert all(line[4]["stat"] == "Sum" and line[4]["period"] == 60 for line in lines)


def test_only_the_outbox_relay_creates_its_table() -> None:
    stack = Stack(App(), "Misuse")
    unused = cast(Any, None)
    with pytest.raises(ValueError, match="outbox relay creates its table"):
        OutboxRelay(
            stack,
            "Relay",
            source=ORDERS.name,
            table=None,
            queues={},
            dlq=unused,
            dedupe_table=unused,
            package=unused,
            alarm_topic=unused,
            log_retention=unused,
        )
