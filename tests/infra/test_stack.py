"""The synthesized stack deploys each declared queue with the settings its declaration asks for."""

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from aws_cdk.assertions import Capture, Match

from conveyor.contract import limits, naming, outputs
from conveyor.contract.loader import TOPOLOGY_ENV
from conveyor.contract.settings import WorkerSettings
from conveyor.worker import effects, lease, schedule_runs
from conveyor.worker.checkpoints import EXPIRES_AT as CHECKPOINT_TTL
from conveyor.worker.checkpoints import KEY as CHECKPOINT_KEY
from conveyor.worker.destinations import state as limits_state
from functions.orders import ORDERS_TABLE
from functions.providers.effects import EFFECTS_TABLE
from functions.providers.effects import KEY_ATTRIBUTE as EFFECTS_KEY
from functions.topology import TOPOLOGY
from infra.app import LOG_RETENTION_CONTEXT, POWERTOOLS_LAYER_CONTEXT, PREFIX_CONTEXT, project_context
from infra.job_queue import (
    CHECKPOINT_ACTIONS,
    DLQ_RETENTION,
    IDEMPOTENCY_ACTIONS,
    LEASE_ACTIONS,
    SCHEDULE_RUN_ACTIONS,
)
from infra.outbox_relay import DEDUPE_ENQUEUE_ACTIONS
from infra.worker_package import HANDLER, POWERTOOLS_LAYER_NAME, stage_asset
from tests.infra.conftest import TOPOLOGY_SPEC, Synthesized, as_list
from tests.infra.test_worker_package import EXPECTED_IN_ASSET, not_for_lambda

QUEUE_NAMES = [queue.name for queue in TOPOLOGY.queues]
ONE_MONTH_DAYS = 30


def seconds(value: timedelta) -> int:
    return int(value.total_seconds())


@pytest.mark.parametrize("name", QUEUE_NAMES)
def test_redrive_backstop_sits_above_the_harness_attempts(synthesized: Synthesized, name: str) -> None:
    ids = synthesized.of_queue(name)
    redrive = synthesized.properties(ids.queue)["RedrivePolicy"]
    assert redrive["deadLetterTargetArn"] == {"Fn::GetAtt": [ids.dlq, "Arn"]}
    assert redrive["maxReceiveCount"] == TOPOLOGY.max_receive_count(name)
    assert redrive["maxReceiveCount"] > TOPOLOGY.max_attempts(name)
    assert redrive["maxReceiveCount"] >= limits.MIN_MAX_RECEIVE_COUNT


@pytest.mark.parametrize("name", QUEUE_NAMES)
def test_visibility_timeout_is_at_least_six_function_timeouts(synthesized: Synthesized, name: str) -> None:
    ids = synthesized.of_queue(name)
    visibility = synthesized.properties(ids.queue)["VisibilityTimeout"]
    timeout = synthesized.properties(ids.function)["Timeout"]
    assert timeout == seconds(TOPOLOGY.queue(name).function_timeout)
    assert visibility >= limits.VISIBILITY_TO_TIMEOUT_RATIO * timeout


@pytest.mark.parametrize("name", QUEUE_NAMES)
def test_event_source_reports_batch_item_failures_with_declared_batching(synthesized: Synthesized, name: str) -> None:
    declaration = TOPOLOGY.queue(name)
    ids = synthesized.of_queue(name)
    window = seconds(declaration.batching_window)
    synthesized.template.has_resource_properties(
        "AWS::Lambda::EventSourceMapping",
        {
            "EventSourceArn": {"Fn::GetAtt": [ids.queue, "Arn"]},
            "FunctionName": {"Ref": ids.function},
            "FunctionResponseTypes": ["ReportBatchItemFailures"],
            "BatchSize": declaration.batch_size,
            "MaximumBatchingWindowInSeconds": window if window else Match.absent(),
            "ScalingConfig": {"MaximumConcurrency": declaration.max_concurrency},
        },
    )


def test_every_event_source_mapping_reports_batch_item_failures(synthesized: Synthesized) -> None:
    """Without it Lambda deletes every message of a batch that returned, failed ones included."""
    mappings = synthesized.template.find_resources("AWS::Lambda::EventSourceMapping")
    # The workers' mappings, the outbox relay's and one per streamed table's relay.
    assert len(mappings) == len(QUEUE_NAMES) + 1 + len(TOPOLOGY.streamed_tables())
    for mapping in mappings.values():
        assert mapping["Properties"]["FunctionResponseTypes"] == ["ReportBatchItemFailures"]


@pytest.mark.parametrize("name", QUEUE_NAMES)
def test_queue_and_dlq_are_encrypted_and_refuse_plain_http(synthesized: Synthesized, name: str) -> None:
    ids = synthesized.of_queue(name)
    for logical_id in (ids.queue, ids.dlq):
        assert synthesized.properties(logical_id)["SqsManagedSseEnabled"] is True
        synthesized.template.has_resource_properties(
            "AWS::SQS::QueuePolicy",
            {
                "Queues": [{"Ref": logical_id}],
                "PolicyDocument": {
                    "Statement": Match.array_with(
                        [
                            Match.object_like(
                                {
                                    "Effect": "Deny",
                                    "Action": "sqs:*",
                                    "Principal": {"AWS": "*"},
                                    "Condition": {"Bool": {"aws:SecureTransport": "false"}},
                                }
                            )
                        ]
                    )
                },
            },
        )


@pytest.mark.parametrize("name", QUEUE_NAMES)
def test_dlq_retains_messages_longer_than_its_queue(synthesized: Synthesized, name: str) -> None:
    ids = synthesized.of_queue(name)
    dlq_retention = synthesized.properties(ids.dlq)["MessageRetentionPeriod"]
    queue_retention = synthesized.properties(ids.queue)["MessageRetentionPeriod"]
    assert dlq_retention == DLQ_RETENTION.to_seconds() == seconds(limits.SQS_MAX_RETENTION)
    assert queue_retention == seconds(TOPOLOGY.queue(name).retention) < dlq_retention


def _alarm_on(synthesized: Synthesized, metric: str, queue_logical_id: str) -> dict[str, Any]:
    for alarm in synthesized.template.find_resources("AWS::CloudWatch::Alarm").values():
        properties: dict[str, Any] = alarm["Properties"]
        if properties.get("MetricName") == metric and properties["Dimensions"] == [
            {"Name": "QueueName", "Value": {"Fn::GetAtt": [queue_logical_id, "QueueName"]}}
        ]:
            return properties
    raise AssertionError(f"no {metric} alarm on {queue_logical_id}")


def _alarm_topic(synthesized: Synthesized) -> dict[str, str]:
    (topic_id,) = synthesized.template.find_resources("AWS::SNS::Topic")
    return {"Ref": topic_id}


@pytest.mark.parametrize("name", QUEUE_NAMES)
def test_age_alarm_threshold_is_the_declared_objective(synthesized: Synthesized, name: str) -> None:
    alarm = _alarm_on(synthesized, "ApproximateAgeOfOldestMessage", synthesized.of_queue(name).queue)
    assert alarm["Namespace"] == "AWS/SQS"
    assert alarm["Statistic"] == "Maximum"
    assert alarm["Threshold"] == TOPOLOGY.queue(name).age_objective.total_seconds()
    assert alarm["ComparisonOperator"] == "GreaterThanThreshold"
    assert alarm["AlarmActions"] == [_alarm_topic(synthesized)]
    assert alarm["OKActions"] == [_alarm_topic(synthesized)]


@pytest.mark.parametrize("name", QUEUE_NAMES)
def test_dlq_alarm_fires_on_the_first_visible_message(synthesized: Synthesized, name: str) -> None:
    alarm = _alarm_on(synthesized, "ApproximateNumberOfMessagesVisible", synthesized.of_queue(name).dlq)
    assert alarm["Threshold"] == 0
    assert alarm["ComparisonOperator"] == "GreaterThanThreshold"
    assert alarm["EvaluationPeriods"] == 1
    assert alarm["AlarmActions"] == [_alarm_topic(synthesized)]


def test_no_alarm_watches_dlq_sends(synthesized: Synthesized) -> None:
    """Messages moved by a redrive policy are not counted in NumberOfMessagesSent."""
    synthesized.template.resource_properties_count_is(
        "AWS::CloudWatch::Alarm", {"MetricName": "NumberOfMessagesSent"}, 0
    )


@pytest.mark.parametrize("name", QUEUE_NAMES)
def test_worker_runs_current_python_on_arm_with_pinned_powertools(synthesized: Synthesized, name: str) -> None:
    function = synthesized.properties(synthesized.of_queue(name).function)
    layer_version = project_context()[POWERTOOLS_LAYER_CONTEXT]
    assert function["Runtime"] == "python3.14"
    assert function["Architectures"] == ["arm64"]
    assert function["Handler"] == HANDLER
    assert function["TracingConfig"] == {"Mode": "Active"}
    assert function["MemorySize"] == TOPOLOGY.queue(name).memory_mb
    (layer,) = function["Layers"]
    layer_arn = "".join(part if isinstance(part, str) else "" for part in layer["Fn::Join"][1])
    assert layer_arn.endswith(f":017000801446:layer:{POWERTOOLS_LAYER_NAME}:{layer_version}")
    # The layer is built for one Python and one architecture: they must match the function's.
    assert "python314-arm64" in POWERTOOLS_LAYER_NAME


@pytest.mark.parametrize("name", QUEUE_NAMES)
def test_worker_environment_names_its_own_queue_dlq_and_table(synthesized: Synthesized, name: str) -> None:
    ids = synthesized.of_queue(name)
    variables = synthesized.properties(ids.function)["Environment"]["Variables"]
    table_id = synthesized.own_table("idempotency_table")
    settings = WorkerSettings.from_environment(
        {key: value if isinstance(value, str) else json.dumps(value) for key, value in variables.items()}
    )
    assert settings.queue == name
    assert json.loads(settings.queue_url) == {"Ref": ids.queue}
    assert json.loads(settings.dlq_url) == {"Ref": ids.dlq}
    assert json.loads(settings.idempotency_table) == {"Ref": table_id}
    assert json.loads(settings.checkpoints_table) == {"Ref": synthesized.table(CHECKPOINT_KEY)}
    # The run audit and the leases: Conveyor's own tables, one of each for all workers.
    schedule_runs_id = synthesized.output_ref(outputs.SCHEDULE_RUNS_TABLE)
    assert json.loads(settings.schedule_runs_table) == {"Ref": schedule_runs_id}
    assert json.loads(settings.leases_table) == {"Ref": synthesized.output_ref(outputs.LEASES_TABLE)}
    assert schedule_runs_id != table_id
    assert variables["POWERTOOLS_METRICS_NAMESPACE"] == "Conveyor"
    # The worker finds the declarations where synth did: the library names no app.
    assert variables[TOPOLOGY_ENV] == TOPOLOGY_SPEC
    assert variables[naming.table_env(EFFECTS_TABLE.name)] == {"Ref": synthesized.table(EFFECTS_KEY)}


def test_critical_capacity_is_reserved_and_covers_its_event_source(synthesized: Synthesized) -> None:
    for name in QUEUE_NAMES:
        declaration = TOPOLOGY.queue(name)
        function = synthesized.properties(synthesized.of_queue(name).function)
        if declaration.reserved_concurrency is None:
            assert "ReservedConcurrentExecutions" not in function
        else:
            assert function["ReservedConcurrentExecutions"] == declaration.reserved_concurrency
            assert function["ReservedConcurrentExecutions"] >= declaration.max_concurrency
    assert "ReservedConcurrentExecutions" in synthesized.properties(synthesized.of_queue("critical").function)


# What grant_read_write_data gives on a declared table.
TABLE_READ_WRITE = {
    "dynamodb:BatchGetItem",
    "dynamodb:BatchWriteItem",
    "dynamodb:ConditionCheckItem",
    "dynamodb:DeleteItem",
    "dynamodb:DescribeTable",
    "dynamodb:GetItem",
    "dynamodb:GetRecords",
    "dynamodb:GetShardIterator",
    "dynamodb:PutItem",
    "dynamodb:Query",
    "dynamodb:Scan",
    "dynamodb:UpdateItem",
}


def _arn(logical_id: str) -> str:
    return json.dumps({"Fn::GetAtt": [logical_id, "Arn"]})


@pytest.mark.parametrize("name", QUEUE_NAMES)
def test_worker_role_grants_only_what_the_worker_uses(synthesized: Synthesized, name: str) -> None:
    ids = synthesized.of_queue(name)
    function = synthesized.properties(ids.function)
    role_id = function["Role"]["Fn::GetAtt"][0]
    log_group_id = function["LoggingConfig"]["LogGroup"]["Ref"]
    table_id = synthesized.own_table("idempotency_table")
    checkpoints_id = synthesized.table(CHECKPOINT_KEY)
    schedule_runs_id = synthesized.own_table("schedule_runs_table")
    leases_id = synthesized.own_table("leases_table")
    limits_id = synthesized.own_table("limits_table")
    effects_id = synthesized.table(EFFECTS_KEY)
    orders_id = synthesized.table(ORDERS_TABLE.key)
    outbox_id = synthesized.output_ref(outputs.OUTBOX_TABLE)
    assert "ManagedPolicyArns" not in synthesized.properties(role_id)
    granted: dict[str, set[str]] = {}
    for statement in synthesized.role_statements(role_id):
        resources = as_list(statement["Resource"])
        actions = as_list(statement["Action"])
        for resource in resources:
            granted.setdefault(json.dumps(resource), set()).update(actions)
    assert granted == {
        _arn(log_group_id): {"logs:CreateLogStream", "logs:PutLogEvents"},
        # X-Ray has no resource-level permissions; the only wildcard resource.
        json.dumps("*"): {"xray:PutTraceSegments", "xray:PutTelemetryRecords"},
        _arn(ids.queue): {
            "sqs:ReceiveMessage",
            "sqs:DeleteMessage",
            "sqs:ChangeMessageVisibility",
            "sqs:SendMessage",
            "sqs:GetQueueAttributes",
            "sqs:GetQueueUrl",
        },
        _arn(ids.dlq): {"sqs:SendMessage", "sqs:GetQueueAttributes", "sqs:GetQueueUrl"},
        _arn(table_id): set(IDEMPOTENCY_ACTIONS),
        _arn(checkpoints_id): set(CHECKPOINT_ACTIONS),
        _arn(schedule_runs_id): set(SCHEDULE_RUN_ACTIONS),
        _arn(leases_id): set(LEASE_ACTIONS),
        _arn(limits_id): set(limits_state.WORKER_ACTIONS),
        _arn(effects_id): TABLE_READ_WRITE,
        _arn(orders_id): TABLE_READ_WRITE,
        # Enqueueing through the outbox, alone or in a transaction with the job's own writes, dedupe keys too.
        _arn(outbox_id): {"dynamodb:PutItem"},
        _arn(synthesized.output_ref(outputs.DEDUPE_TABLE)): set(DEDUPE_ENQUEUE_ACTIONS),
        # What the jobs did at their destinations (ctx.effect).
        _arn(synthesized.output_ref(outputs.LEDGER_TABLE)): set(effects.WORKER_ACTIONS),
    }


@pytest.mark.parametrize("name", QUEUE_NAMES)
def test_worker_logs_expire_as_cdk_json_says(synthesized: Synthesized, name: str) -> None:
    assert project_context()[LOG_RETENTION_CONTEXT] == "ONE_MONTH"
    log_group_capture = Capture()
    synthesized.template.has_resource_properties(
        "AWS::Lambda::Function",
        {
            "Environment": {"Variables": Match.object_like({"CONVEYOR_QUEUE": name})},
            "LoggingConfig": {"LogGroup": {"Ref": log_group_capture}},
        },
    )
    assert synthesized.properties(log_group_capture.as_string())["RetentionInDays"] == ONE_MONTH_DAYS


def test_idempotency_table_is_on_demand_expiring_and_recoverable(synthesized: Synthesized) -> None:
    table = synthesized.properties(synthesized.own_table("idempotency_table"))
    assert table["BillingMode"] == "PAY_PER_REQUEST"
    assert table["TimeToLiveSpecification"] == {"AttributeName": "expiration", "Enabled": True}
    assert table["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}


def test_checkpoints_table_is_on_demand_expiring_and_recoverable(synthesized: Synthesized) -> None:
    table = synthesized.properties(synthesized.table(CHECKPOINT_KEY))
    assert table["BillingMode"] == "PAY_PER_REQUEST"
    assert table["TimeToLiveSpecification"] == {"AttributeName": CHECKPOINT_TTL, "Enabled": True}
    assert table["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}


def test_schedule_runs_table_is_on_demand_expiring_and_recoverable(synthesized: Synthesized) -> None:
    table = synthesized.properties(synthesized.own_table("schedule_runs_table"))
    assert table["KeySchema"] == [{"AttributeName": schedule_runs.KEY, "KeyType": "HASH"}]
    assert table["AttributeDefinitions"] == [{"AttributeName": schedule_runs.KEY, "AttributeType": "S"}]
    assert table["BillingMode"] == "PAY_PER_REQUEST"
    assert table["TimeToLiveSpecification"] == {"AttributeName": schedule_runs.EXPIRES_AT, "Enabled": True}
    assert table["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}


def test_leases_table_never_expires_items_so_fencing_tokens_only_grow(synthesized: Synthesized) -> None:
    """TTL would delete an expired lease's item, and the next holder would start again at token 1."""
    table = synthesized.properties(synthesized.own_table("leases_table"))
    assert table["KeySchema"] == [{"AttributeName": lease.KEY, "KeyType": "HASH"}]
    assert table["AttributeDefinitions"] == [{"AttributeName": lease.KEY, "AttributeType": "S"}]
    assert table["BillingMode"] == "PAY_PER_REQUEST"
    assert "TimeToLiveSpecification" not in table
    assert table["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}
    # Leases change hands by conditional update only: no worker may put or delete a lease item.
    assert not {"dynamodb:PutItem", "dynamodb:DeleteItem"} & set(LEASE_ACTIONS)


def test_outputs_name_the_run_audit_and_lease_tables(synthesized: Synthesized) -> None:
    assert synthesized.output_ref(outputs.SCHEDULE_RUNS_TABLE) == synthesized.own_table("schedule_runs_table")
    assert synthesized.output_ref(outputs.LEASES_TABLE) == synthesized.own_table("leases_table")
    # The Scheduler group, its schedules and their DLQ exist only for a topology that declares schedules.
    declared = bool(synthesized.topology.schedules)
    stack_outputs = synthesized.template.to_json()["Outputs"]
    assert (outputs.SCHEDULE_GROUP in stack_outputs) == declared
    assert (outputs.SCHEDULES_DLQ_URL in stack_outputs) == declared
    scheduled = sum(schedule.shards for schedule in synthesized.topology.schedules)
    synthesized.template.resource_count_is("AWS::Scheduler::Schedule", scheduled)


@pytest.mark.parametrize("name", QUEUE_NAMES)
def test_queues_have_the_fixed_names_producers_resolve(synthesized: Synthesized, name: str) -> None:
    ids = synthesized.of_queue(name)
    fifo = TOPOLOGY.queue(name).fifo
    prefix = project_context()[PREFIX_CONTEXT]
    assert synthesized.properties(ids.queue)["QueueName"] == naming.queue_name(name, fifo=fifo, prefix=prefix)
    assert synthesized.properties(ids.dlq)["QueueName"] == naming.dlq_name(name, fifo=fifo, prefix=prefix)


def test_alarm_topic_is_encrypted_with_a_rotating_key_cloudwatch_can_use(synthesized: Synthesized) -> None:
    (key_id,) = synthesized.template.find_resources("AWS::KMS::Key")
    key = synthesized.properties(key_id)
    assert key["EnableKeyRotation"] is True
    cloudwatch_grants = [
        statement
        for statement in key["KeyPolicy"]["Statement"]
        if statement["Principal"] == {"Service": "cloudwatch.amazonaws.com"}
    ]
    assert cloudwatch_grants
    assert set(cloudwatch_grants[0]["Action"]) == {"kms:Decrypt", "kms:GenerateDataKey*"}
    synthesized.template.has_resource_properties("AWS::SNS::Topic", {"KmsMasterKeyId": {"Fn::GetAtt": [key_id, "Arn"]}})
    synthesized.template.has_resource_properties(
        "AWS::SNS::TopicPolicy",
        {
            "PolicyDocument": {
                "Statement": Match.array_with(
                    [Match.object_like({"Effect": "Deny", "Condition": {"Bool": {"aws:SecureTransport": "false"}}})]
                )
            }
        },
    )


@pytest.mark.parametrize("name", QUEUE_NAMES)
def test_outputs_let_tools_find_each_queue(synthesized: Synthesized, name: str) -> None:
    ids = synthesized.of_queue(name)
    stack_outputs = synthesized.template.to_json()["Outputs"]
    assert stack_outputs[outputs.queue_output_key(name, outputs.QUEUE_URL)]["Value"] == {"Ref": ids.queue}
    assert stack_outputs[outputs.queue_output_key(name, outputs.DLQ_URL)]["Value"] == {"Ref": ids.dlq}
    assert stack_outputs[outputs.queue_output_key(name, outputs.WORKER_FUNCTION)]["Value"] == {"Ref": ids.function}
    log_group = synthesized.properties(ids.function)["LoggingConfig"]["LogGroup"]
    assert stack_outputs[outputs.queue_output_key(name, outputs.WORKER_LOG_GROUP)]["Value"] == log_group
    mapping_output = stack_outputs[outputs.queue_output_key(name, outputs.EVENT_SOURCE_MAPPING)]["Value"]
    assert synthesized.resources[mapping_output["Ref"]]["Type"] == "AWS::Lambda::EventSourceMapping"


def test_worker_asset_ships_only_what_runs_in_lambda(synthesized: Synthesized, tmp_path: Path) -> None:
    """The asset synth wrote is the one stage_asset lists: handlers, the library's Lambda sides, requirements."""
    (asset_dir,) = [path for path in synthesized.outdir.iterdir() if path.name.startswith("asset.")]
    shipped = {path.relative_to(asset_dir).as_posix() for path in asset_dir.rglob("*") if path.is_file()}
    assert not_for_lambda(shipped) == []
    assert sorted(EXPECTED_IN_ASSET - shipped) == []
    assert shipped == {name for name, _ in stage_asset(tmp_path)}
