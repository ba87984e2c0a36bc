"""Every way a dead letter goes back to its queue, on the local runtime under strict mode.

A DLQ entry the harness wrote carries up to ten attributes. `conveyor dlq redrive` sends the
body with two of its own; the SQS console's redrive and a script's StartMessageMoveTask keep
all ten. Whichever path returned it, the job must run again, snooze (re-sent with its own
attributes, never an eleventh) and succeed. Redrive "to source" without a destination fails for
these entries on AWS (they have no DeadLetterQueueSourceArn): the emulated move task does too.
"""

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from conveyor.contract import message_attributes as attrs
from conveyor.contract.envelope import Envelope, new_job_id
from conveyor.contract.reasons import Reason
from conveyor.worker.outcomes import Kind
from tests.e2e.conftest import InProcess, LocalAws, run_cli, wait_until
from tests.fixtures.e2e_topology import QUEUE, record_key

HOUR_S = 3600


def arn(aws: LocalAws, url: str) -> str:
    return str(aws.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"])


def dead_lettered_comeback(aws: LocalAws, name: str, *, snooze_s: int) -> None:
    """A comeback job, returned once by `conveyor dlq redrive`, now in the DLQ again with all ten attributes."""
    body = Envelope(
        type="comeback", v=1, id=new_job_id(), created_at=datetime.now(UTC), data={"name": name, "snooze_s": snooze_s}
    ).to_json()
    aws.sqs.send_message(
        QueueUrl=aws.queue_url,
        MessageBody=body,
        MessageAttributes={
            attrs.REDRIVEN_AT: attrs.timestamp(datetime.now(UTC)),
            attrs.REDRIVE_ID: attrs.string("earlier-redrive"),
        },
    )
    wait_until(lambda: aws.depth(aws.dlq_url).visible == 1, "the job is dead-lettered")
    entry = aws.sqs.receive_message(QueueUrl=aws.dlq_url, MessageAttributeNames=["All"], VisibilityTimeout=0)
    (message,) = entry["Messages"]
    assert message["MessageAttributes"][attrs.REASON]["StringValue"] == Reason.PERMANENT_ERROR
    assert len(message["MessageAttributes"]) == 10


def move_task(aws: LocalAws, *, destination: str | None) -> dict[str, Any]:
    """StartMessageMoveTask, as the SQS console's "Start DLQ redrive" calls it; returns the finished task."""
    request = {"SourceArn": arn(aws, aws.dlq_url)}
    if destination is not None:
        request["DestinationArn"] = destination
    aws.sqs.start_message_move_task(**request)

    def finished() -> dict[str, Any] | None:
        (task,) = aws.sqs.list_message_move_tasks(SourceArn=request["SourceArn"])["Results"]
        return task if task["Status"] != "RUNNING" else None

    return wait_until(finished, "the move task finished")


def kinds(runtime: InProcess) -> list[Kind]:
    """How each run of the comeback job ended, in order (a snooze is reported once its copy was sent)."""
    with runtime.observed.lock:
        return [outcome.kind for outcome in runtime.observed.outcomes if outcome.job_type == "comeback"]


def effect(aws: LocalAws, name: str) -> tuple[int, int]:
    found = aws.effect(record_key(name))
    return (found.calls, found.applied) if found else (0, 0)


@pytest.mark.parametrize("path", ["console-custom-destination", "conveyor-dlq-redrive"])
def test_dead_letter_returned_by_each_redrive_path_snoozes_and_succeeds(
    aws: LocalAws, runtime: InProcess, tmp_path: Path, path: str
) -> None:
    dead_lettered_comeback(aws, "back", snooze_s=1)

    if path == "conveyor-dlq-redrive":
        done = run_cli("dlq", "redrive", QUEUE, "--json", workdir=tmp_path / "cli")
        assert done.exit_code == 0, done.stderr
    else:
        task = move_task(aws, destination=arn(aws, aws.queue_url))
        assert (task["Status"], task["ApproximateNumberOfMessagesMoved"]) == ("COMPLETED", 1)

    # Run 2 snoozes (the copy must be accepted by strict SQS), run 3 applies the effect.
    wait_until(lambda: effect(aws, "back") == (3, 1), "the returned job snoozed, then succeeded")
    wait_until(lambda: aws.is_empty(aws.queue_url), "the queue is empty")
    assert kinds(runtime) == [Kind.DEAD_LETTERED, Kind.SNOOZED, Kind.SUCCEEDED], "no run failed on the way"
    assert aws.depth(aws.dlq_url).total == 0


def test_moved_back_job_snoozed_for_an_hour_waits_with_its_own_attributes(aws: LocalAws, runtime: InProcess) -> None:
    """Past SQS's 15-minute delay the copy also carries not_before: still within ten attributes."""
    dead_lettered_comeback(aws, "sleeper", snooze_s=HOUR_S)

    move_task(aws, destination=arn(aws, aws.queue_url))

    wait_until(lambda: aws.depth(aws.queue_url).delayed == 1, "the snoozed copy waits, delayed")
    assert effect(aws, "sleeper") == (2, 0), "ran once more and snoozed; no retry of a refused send"
    assert kinds(runtime) == [Kind.DEAD_LETTERED, Kind.SNOOZED]
    assert aws.depth(aws.dlq_url).total == 0


def test_redrive_to_source_fails_for_entries_the_harness_dead_lettered(aws: LocalAws, runtime: InProcess) -> None:
    """As on AWS: sent to the DLQ by SendMessage, they carry no DeadLetterQueueSourceArn; nothing is lost."""
    dead_lettered_comeback(aws, "stays", snooze_s=1)

    task = move_task(aws, destination=None)

    assert (task["Status"], task["FailureReason"]) == ("FAILED", "CouldNotDetermineMessageSource")
    wait_until(lambda: aws.depth(aws.dlq_url).visible == 1, "the entry is still in the DLQ")
    assert effect(aws, "stays") == (1, 0)
    assert kinds(runtime) == [Kind.DEAD_LETTERED]
