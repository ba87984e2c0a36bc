"""The Lambda entry points: settings from the environment, a partial batch response out."""

import importlib
import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from conveyor.contract.errors import DeclarationError
from conveyor.local.event_source import to_lambda_record
from conveyor.worker import tracing
from conveyor.worker.handler import make_handler
from functions.providers.effects import EffectsLedger
from functions.topology import TOPOLOGY
from tests.aws import Aws, FunctionEnvironment
from tests.events import sqs_event, sqs_record
from tests.lambda_context import lambda_context


@pytest.fixture
def function_environment() -> FunctionEnvironment:
    """The default queue's worker's environment, as its function is deployed with."""
    return lambda aws: aws.settings("default").to_environment()


def test_lambda_handler_runs_the_batch_and_reports_only_failures(aws: Aws) -> None:
    url = aws.queue_url("default")
    arn = aws.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    created = datetime.now(UTC).isoformat()
    for user in ("u-1", "flaky-1-u"):
        body = {
            "type": "send_welcome_email",
            "v": 2,
            "id": f"job-{user}",
            "created_at": created,
            "data": {"user_id": user},
        }
        aws.sqs.send_message(QueueUrl=url, MessageBody=json.dumps(body))
    messages = aws.receive(url)
    by_id = {json.loads(m["Body"])["id"]: m["MessageId"] for m in messages}
    handler = make_handler(TOPOLOGY)
    response = handler(sqs_event(*(to_lambda_record(m, queue_arn=arn) for m in messages)), lambda_context())
    assert response == {"batchItemFailures": [{"itemIdentifier": by_id["job-flaky-1-u"]}]}
    effect = EffectsLedger(client=aws.dynamodb).get("email:welcome-en:u-1@users.example")
    assert effect is not None
    assert effect.applied == 1


def test_handler_without_its_environment_names_what_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CONVEYOR_DLQ_URL", raising=False)
    monkeypatch.setenv("CONVEYOR_QUEUE", "default")
    with pytest.raises(DeclarationError, match="worker environment: missing CONVEYOR_QUEUE_URL, CONVEYOR_DLQ_URL"):
        make_handler(TOPOLOGY)(sqs_event(sqs_record("x")), lambda_context())


ENTRY_POINTS = ["functions.worker", "functions.relay"]
ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("module", ENTRY_POINTS)
def test_the_shipped_entry_point_loads_the_project_topology(module: str) -> None:
    assert callable(importlib.import_module(module).handler)


def loaded_by_importing(module: str, **environment: str) -> set[str]:
    """Every module a fresh interpreter holds after importing ``module``: what a cold start loads."""
    probe = f"import json, sys, {module}; print(json.dumps(sorted(sys.modules)))"
    result = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        env=os.environ | environment,
    )
    return set(json.loads(result.stdout))


@pytest.mark.parametrize("module", ENTRY_POINTS)
def test_the_entry_point_imports_only_what_lambda_has(module: str) -> None:
    """Lambda has the Powertools layer (with pydantic) and boto3; nothing from the dev or deploy tools."""
    unavailable = {"click", "moto", "aws_cdk", "cdk_nag", "constructs", "jsonschema", "werkzeug", "flask"}
    assert {name.split(".")[0] for name in loaded_by_importing(module)} & unavailable == set()


@pytest.mark.parametrize("module", ENTRY_POINTS)
def test_a_cold_start_without_tracing_loads_neither_the_xray_sdk_nor_powertools_parser_models(module: str) -> None:
    """Building a Tracer imports the X-Ray SDK even to disable it, and Powertools' batch module loads every
    parser model when pydantic came first: each costs a cold start tens to hundreds of milliseconds."""
    loaded = loaded_by_importing(module, POWERTOOLS_TRACE_DISABLED="true")
    assert "aws_lambda_powertools.utilities.batch" in loaded
    assert {
        name for name in loaded if name.startswith(("aws_xray_sdk", "aws_lambda_powertools.utilities.parser"))
    } == set()


def test_a_worker_cold_start_loads_neither_the_relay_nor_leases() -> None:
    loaded = loaded_by_importing("functions.worker")
    assert "conveyor.worker.harness" in loaded
    assert {"conveyor.worker.relay", "conveyor.worker.lease"} & loaded == set()


def test_tracing_on_in_lambda_builds_the_tracer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAMBDA_TASK_ROOT", str(ROOT))
    monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "false")
    assert tracing.tracing_enabled()
    monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "true")
    assert not tracing.tracing_enabled()
    monkeypatch.delenv("POWERTOOLS_TRACE_DISABLED")
    monkeypatch.setenv("AWS_SAM_LOCAL", "true")
    assert not tracing.tracing_enabled()
