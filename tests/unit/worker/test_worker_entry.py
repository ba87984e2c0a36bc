"""The Lambda entry points: settings from the environment, a partial batch response out."""

import importlib
import json
from datetime import UTC, datetime

import pytest

from conveyor.contract.errors import DeclarationError
from conveyor.local.event_source import to_lambda_record
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


@pytest.mark.parametrize("module", ENTRY_POINTS)
def test_the_shipped_entry_point_loads_the_project_topology(module: str) -> None:
    assert callable(importlib.import_module(module).handler)


@pytest.mark.parametrize("module", ENTRY_POINTS)
def test_the_entry_point_imports_only_what_lambda_has(module: str) -> None:
    """Lambda has the Powertools layer (with pydantic) and boto3; nothing from the dev or deploy tools."""
    import subprocess
    import sys
    from pathlib import Path

    unavailable = ["click", "moto", "aws_cdk", "cdk_nag", "constructs", "jsonschema", "werkzeug", "flask"]
    probe = f"import sys, {module}; print(sorted({{m.split('.')[0] for m in sys.modules}} & set({unavailable!r})))"
    root = Path(__file__).resolve().parents[3]
    result = subprocess.run([sys.executable, "-c", probe], cwd=root, capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"
