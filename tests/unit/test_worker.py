"""Until job handlers exist, the worker acknowledges nothing: every record stays on the queue."""

import pytest

from conveyor.declarations import DeclarationError
from conveyor.settings import WorkerSettings
from conveyor.worker import handle
from tests.events import sqs_event, sqs_record
from tests.lambda_context import lambda_context

SETTINGS = WorkerSettings(
    queue="default",
    queue_url="http://127.0.0.1/000000000000/conveyor-default",
    dlq_url="http://127.0.0.1/000000000000/conveyor-default-dlq",
    idempotency_table="conveyor-idempotency",
)


@pytest.fixture
def worker_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in SETTINGS.to_environment().items():
        monkeypatch.setenv(name, value)


@pytest.mark.usefixtures("worker_environment")
def test_worker_reports_every_unrunnable_record_as_a_batch_item_failure() -> None:
    envelope = sqs_record({"type": "send_welcome_email", "v": 1, "id": "j-1", "data": {"user_id": "u-1"}})
    not_json = sqs_record("Test message.")
    response = handle(sqs_event(envelope, not_json), lambda_context())
    assert response == {
        "batchItemFailures": [
            {"itemIdentifier": envelope["messageId"]},
            {"itemIdentifier": not_json["messageId"]},
        ]
    }


def test_worker_without_its_environment_names_what_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in SETTINGS.to_environment():
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(DeclarationError, match="missing CONVEYOR_QUEUE, CONVEYOR_QUEUE_URL"):
        handle(sqs_event(sqs_record("x")), lambda_context())
