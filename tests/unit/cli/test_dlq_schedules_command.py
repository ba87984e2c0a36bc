"""`conveyor dlq ... schedules`: Scheduler's dead-letter events read, redriven to their queue and discarded.

The entries are put there by the local scheduler, as Scheduler does (the target input as the body, its
attributes beside it), after a send to a queue that is gone; the CLI runs against the in-process moto.
"""

import json
import random
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from conveyor.cli.support import EXIT_FAILED, EXIT_NOT_FOUND, EXIT_USAGE
from conveyor.contract.envelope import parse_envelope
from conveyor.contract.schedules import Schedule
from conveyor.contract.topology import Topology
from conveyor.local.scheduler import LocalScheduler, ScheduleClock
from tests.aws import Aws
from tests.cli_support import conveyor, conveyor_json
from tests.fixtures.schedule_topology import HEARTBEAT, NIGHTLY_REPORT, TOPOLOGY, build_report

SPEC = ("--topology", "tests.fixtures.schedule_topology:TOPOLOGY")
SCHEDULED = datetime(2026, 6, 1, 0, 30, tzinfo=UTC)
NIGHTLY_JOB = "schedule:nightly-report@2026-06-01T00:30:00Z"
HEARTBEAT_JOB = "schedule:heartbeat@2026-06-01T00:30:00Z"
ELSEWHERE = "arn:aws:sqs:us-east-1:123456789012:somewhere-else"


@pytest.fixture
def topology() -> Topology:
    return TOPOLOGY


def fired(aws: Aws, *schedules: Schedule, target_arn: str | None = None) -> None:
    """Each schedule's occurrence at SCHEDULED sent to a queue that is gone: Scheduler dead-letters it at once."""
    queue = aws.provisioned.queues[build_report.queue]
    gone = replace(queue, url=queue.url + "-gone", arn=target_arn or queue.arn)
    scheduler = LocalScheduler(
        Topology(queues=TOPOLOGY.queues, job_types=TOPOLOGY.job_types, schedules=schedules),
        sqs=aws.sqs,
        queues={queue.name: gone},
        clock=ScheduleClock(SCHEDULED.replace(minute=0)),
        rng=random.Random(7),
        dlq_url=aws.provisioned.schedules_dlq_url,
    )
    scheduler.clock.set(SCHEDULED.replace(minute=31))
    assert scheduler.tick() == []


def dlq(*argv: str) -> tuple[int, str, str]:
    return conveyor(*SPEC, "dlq", *argv)


def dlq_json(*argv: str) -> Any:
    return conveyor_json(*SPEC, "dlq", *argv)


def queued(aws: Aws) -> list[str]:
    return [parse_envelope(message["Body"]).id for message in aws.receive(aws.queue_url(build_report.queue))]


def test_ls_lists_and_groups_scheduler_dead_letters_by_error_code(local: Aws) -> None:
    fired(local, NIGHTLY_REPORT)
    (entry,) = dlq_json("ls", "schedules")
    assert (entry["job_id"], entry["job_type"], entry["source"]) == (NIGHTLY_JOB, "build_report", "nightly-report")
    assert entry["reason"] == "AWS.SimpleQueueService.NonExistentQueue"
    assert entry["attempts"] == 1
    assert dlq_json("ls", "schedules", "--group") == [
        {"reason": "AWS.SimpleQueueService.NonExistentQueue", "error_class": "-", "count": 1}
    ]
    code, out, _ = dlq("ls", "schedules")
    assert code == 0
    assert "SCHEDULE" in out.splitlines()[0]
    assert "nightly-report" in out


def test_show_prints_the_envelope_and_schedulers_attributes(local: Aws) -> None:
    fired(local, NIGHTLY_REPORT)
    (detail,) = dlq_json("show", "schedules", NIGHTLY_JOB)
    assert detail["envelope"]["id"] == NIGHTLY_JOB
    assert detail["attributes"]["TARGET_ARN"] == local.provisioned.queues["reports"].arn
    assert detail["attributes"]["RETRY_ATTEMPTS"] == "0"
    code, out, _ = dlq("show", "schedules", NIGHTLY_JOB)
    assert code == 0
    assert "  SCHEDULE_ARN: arn:" in out


def test_redrive_sends_each_envelope_to_the_queue_its_schedule_targets_and_audits(local: Aws) -> None:
    fired(local, NIGHTLY_REPORT, HEARTBEAT)  # the nightly run, and the heartbeat every 5 minutes
    jobs = sorted(entry["job_id"] for entry in dlq_json("ls", "schedules"))
    assert NIGHTLY_JOB in jobs
    assert HEARTBEAT_JOB in jobs
    dry = dlq_json("redrive", "schedules", "--dry-run")
    assert (dry["matched"], dry["redriven"]) == (len(jobs), 0)
    assert queued(local) == []

    report = dlq_json("redrive", "schedules", "--type", "build_report", "--rate", "50/s")
    assert (report["matched"], report["redriven"], report["refused"]) == (len(jobs), len(jobs), {})
    assert sorted(queued(local)) == jobs
    assert dlq_json("ls", "schedules") == []
    (row,) = json.loads(conveyor(*SPEC, "audit", "--json")[1])
    assert (row["action"], row["queue"], row["details"]["redriven"]) == ("dlq.redrive", "schedules", len(jobs))


def test_a_target_that_is_no_declared_queue_falls_back_to_the_job_types_queue(local: Aws) -> None:
    fired(local, NIGHTLY_REPORT, target_arn=ELSEWHERE)
    assert dlq_json("redrive", "schedules")["redriven"] == 1
    assert queued(local) == [NIGHTLY_JOB]


def test_an_entry_with_neither_a_known_target_nor_a_job_is_refused_and_stays(local: Aws) -> None:
    local.sqs.send_message(
        QueueUrl=local.provisioned.schedules_dlq_url,
        MessageBody='{"not": "a job"}',
        MessageAttributes={
            "ERROR_CODE": {"DataType": "String", "StringValue": "AccessDenied"},
            "TARGET_ARN": {"DataType": "String", "StringValue": ELSEWHERE},
        },
    )
    code, _, err = dlq("redrive", "schedules")
    assert code == EXIT_FAILED
    assert err.strip() == (
        f"conveyor: 1 entries were not redriven and stay in the DLQ: its TARGET_ARN {ELSEWHERE} is no declared "
        "queue and its body is no job of a declared type"
    )
    (entry,) = dlq_json("ls", "schedules")
    assert entry["reason"] == "AccessDenied"


def test_discard_needs_yes_then_deletes_and_audits(local: Aws) -> None:
    fired(local, NIGHTLY_REPORT)
    code, _, err = dlq("discard", "schedules")
    assert code == EXIT_USAGE
    assert "--yes" in err
    assert len(dlq_json("ls", "schedules")) == 1
    assert dlq_json("discard", "schedules", "--yes")["deleted"] == 1
    assert dlq_json("ls", "schedules") == []
    (row,) = json.loads(conveyor(*SPEC, "audit", "--json")[1])
    assert (row["action"], row["queue"], row["details"]["deleted"]) == ("dlq.discard", "schedules", 1)


@pytest.mark.parametrize(
    ("argv", "code", "line"),
    [
        (
            ("ls", "nightly"),
            EXIT_NOT_FOUND,
            "conveyor: unknown DLQ 'nightly'; one of: reports, relay, schedules",
        ),
        (
            ("ls", "schedules", "--type", "nope"),
            EXIT_NOT_FOUND,
            "conveyor: job type 'nope' is not scheduled (build_report, sweep_orders)",
        ),
        (
            ("redrive", "relay", "--canary", "1"),
            EXIT_USAGE,
            "conveyor: --canary does not apply to the relay DLQ: each record is checked again by the relay as it "
            "is redriven",
        ),
    ],
)
def test_bad_input_is_one_line_and_a_nonzero_exit(local: Aws, argv: tuple[str, ...], code: int, line: str) -> None:
    got, out, err = dlq(*argv)
    assert (got, out, err.strip()) == (code, "", line)
