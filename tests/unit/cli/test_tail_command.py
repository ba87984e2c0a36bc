"""`conveyor tail` in AWS: the stack's worker log groups, read with FilterLogEvents (moto), until Ctrl-C.

The pause between polls is replaced: the first pause lets a test log what happens meanwhile, a later
one stands for the operator's Ctrl-C. Nothing sleeps.
"""

import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest

from conveyor.cli import tail_command
from conveyor.contract import outputs
from tests.cli_support import conveyor
from tests.fixtures.small_topology import STACK_OUTPUTS, TOPOLOGY

SMALL = "tests.fixtures.small_topology:TOPOLOGY"
GROUP = "/aws/lambda/Conveyor-OnlyWorker-ABC"
assert [queue.name for queue in TOPOLOGY.queues] == ["only"]


def deploy(stack_outputs: dict[str, str]) -> None:
    template = {
        "Resources": {"Anything": {"Type": "AWS::SQS::Queue"}},
        "Outputs": {key: {"Value": value} for key, value in stack_outputs.items()},
    }
    boto3.client("cloudformation").create_stack(StackName=outputs.STACK_NAME, TemplateBody=json.dumps(template))


@pytest.fixture
def logs(empty_aws: None) -> Any:
    deploy(STACK_OUTPUTS | {outputs.queue_output_key("only", outputs.WORKER_LOG_GROUP): GROUP})
    client = boto3.client("logs")
    client.create_log_group(logGroupName=GROUP)
    client.create_log_stream(logGroupName=GROUP, logStreamName="s")
    return client


def log(logs: Any, **record: Any) -> None:
    event = {"timestamp": int(datetime.now(UTC).timestamp() * 1000), "message": json.dumps(record)}
    logs.put_log_events(logGroupName=GROUP, logStreamName="s", logEvents=[event])


def job_event(job_id: str, outcome: str = "succeeded") -> dict[str, Any]:
    return {"message": "job " + outcome, "outcome": outcome, "queue": "only", "job_type": "ping", "job_id": job_id}


def pauses(monkeypatch: pytest.MonkeyPatch, *between: Callable[[], None]) -> list[float]:
    """Each pause runs the next of ``between``; the pause after them is Ctrl-C."""
    taken: list[float] = []
    pending = list(between)

    def pause(seconds: float) -> None:
        taken.append(seconds)
        if not pending:
            raise KeyboardInterrupt
        pending.pop(0)()

    monkeypatch.setattr(tail_command, "sleep", pause)
    return taken


def test_tail_prints_job_events_as_they_come_and_ctrl_c_exits_130(logs: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    log(logs, **job_event("job-before"))
    log(logs, message="the job's own line", queue="only", job_id="job-before")
    taken = pauses(monkeypatch, lambda: log(logs, **job_event("job-after", "retried")))
    code, out, err = conveyor("--topology", SMALL, "tail", "--log-format", "json")
    assert code == 130
    assert err == ""
    assert [(record["job_id"], record["outcome"]) for record in map(json.loads, out.splitlines())] == [
        ("job-before", "succeeded"),
        ("job-after", "retried"),
    ]
    assert taken == [2.0, 2.0]


def test_pretty_tail_is_one_line_per_event(logs: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    log(logs, **job_event("3f2a9c1e-0000"))
    pauses(monkeypatch)
    code, out, _ = conveyor("--topology", SMALL, "tail", "--log-format", "pretty", "--job", "3f2a")
    assert code == 130
    (line,) = out.splitlines()
    assert line.split()[1:5] == ["only", "ping", "3f2a9c1e", "succeeded"]


def test_a_job_never_seen_is_waited_for_with_a_clear_message(logs: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    log(logs, **job_event("someone-else"))
    pauses(monkeypatch, lambda: None, lambda: log(logs, **job_event("abc123", "dead_lettered")))
    code, out, err = conveyor("--topology", SMALL, "tail", "--job", "abc", "--log-format", "json")
    assert code == 130
    assert err == "conveyor: waiting for job abc... (Ctrl-C to stop)\n"  # once, however long it waits
    assert [json.loads(line)["job_id"] for line in out.splitlines()] == ["abc123"]


@pytest.mark.parametrize(
    ("argv", "code", "message"),
    [
        (["tail", "--since", "ten minutes"], 2, "--since 'ten minutes'"),
        (["tail", "--queue", "nowhere"], 3, "unknown queue 'nowhere'; declared: only"),
        (["tail", "--type", "nothing"], 3, "unknown job type 'nothing'"),
    ],
)
def test_bad_options_are_one_line(argv: list[str], code: int, message: str) -> None:
    exit_code, out, err = conveyor("--topology", SMALL, *argv)
    assert (exit_code, out) == (code, "")
    assert len(err.strip().splitlines()) == 1
    assert message in err


def test_a_stack_without_log_group_outputs_says_to_deploy(empty_aws: None) -> None:
    deploy(STACK_OUTPUTS)
    code, out, err = conveyor("--topology", SMALL, "tail")
    assert (code, out) == (3, "")
    assert err == f"conveyor: the stack has no {outputs.WORKER_LOG_GROUP} outputs; deploy this version of the stack\n"
