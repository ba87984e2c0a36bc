"""The local runtime as a dev server, against a real moto server: reload, `conveyor tail`, restart.

- a reload picks up a new job module and queue: the new queue is provisioned and its jobs run,
  while an old queue's message (delayed, so no worker takes it meanwhile) is still there;
- code that fails to import is one line, and the workers already running go on;
- `conveyor tail` follows the job events the running runtime shipped to the embedded CloudWatch Logs,
  with the same code path as in AWS.
Reloads are called directly (or fed a change as watchfiles would yield it): nothing sleeps.
"""

import json
import textwrap
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from watchfiles import Change

from conveyor.cli import tail_command
from conveyor.cli.main import main
from conveyor.contract import naming
from conveyor.contract.loader import load_topology
from conveyor.contract.topology import Topology
from conveyor.local.console import JobEvent
from conveyor.local.demo import Observed, queue_depth
from conveyor.local.reload import Reloader, forget, watched_paths
from conveyor.local.runtime import LocalRuntime, worker_log_groups
from conveyor.ops.tail import TailFilter, follow
from conveyor.sdk.client import JobClient
from conveyor.sdk.prepare import JobRequest
from conveyor.worker.outcomes import Kind
from tests.e2e.conftest import STOP_S, LocalAws, wait_until

FIRST = """
from datetime import timedelta

from conveyor import job
from conveyor.contract.declarations import Queue
from conveyor.contract.job_context import JobContext
from conveyor.contract.payloads import Payload
from conveyor.contract.topology import Topology


class Note(Payload):
    text: str


@job("first_note", queue="first", model=Note)
def first_note(payload: Note, ctx: JobContext) -> None:
    ctx.logger.info("noted")
"""
TOPOLOGY_V1 = (
    FIRST
    + """
TOPOLOGY = Topology(queues=(Queue("first", age_objective=timedelta(minutes=1)),), job_types=(first_note,))
"""
)
SECOND_JOB = """
from conveyor import job
from conveyor.contract.job_context import JobContext
from conveyor.contract.payloads import Payload


class Greeting(Payload):
    name: str


@job("second_greeting", queue="second", model=Greeting)
def second_greeting(payload: Greeting, ctx: JobContext) -> None:
    ctx.logger.info("hello %s", payload.name)
"""
TOPOLOGY_V2 = (
    FIRST
    + """
from {package}.second import second_greeting

TOPOLOGY = Topology(
    queues=(Queue("first", age_objective=timedelta(minutes=1)), Queue("second", age_objective=timedelta(minutes=1))),
    job_types=(first_note, second_greeting),
)
"""
)


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, Path]]:
    """A project of its own (a package with a topology module), importable, under a name no other test uses."""
    package = f"devproject_{uuid.uuid4().hex[:8]}"
    root = tmp_path / package
    root.mkdir()
    (root / "__init__.py").write_text("")
    (root / "topology.py").write_text(textwrap.dedent(TOPOLOGY_V1))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield f"{package}.topology:TOPOLOGY", root
    forget(package)


@pytest.fixture
def topology(project: tuple[str, Path]) -> Topology:
    return load_topology(project[0])


@pytest.fixture
def dev(aws: LocalAws, tmp_path: Path) -> Iterator[tuple[LocalRuntime, Observed]]:
    observed = Observed()
    runtime = LocalRuntime(aws.topology, endpoint_url=aws.endpoint, observer=observed.record)
    runtime.start(raw_values=tmp_path / "metrics.jsonl")
    try:
        yield runtime, observed
    finally:
        assert runtime.drain(grace_s=STOP_S)


def succeeded(observed: Observed, job_id: str) -> bool:
    with observed.lock:
        return any(o.job_id == job_id and o.kind is Kind.SUCCEEDED for o in observed.outcomes)


def test_a_reload_provisions_the_new_queue_runs_its_jobs_and_keeps_the_old_messages(
    aws: LocalAws, dev: tuple[LocalRuntime, Observed], project: tuple[str, Path]
) -> None:
    runtime, observed = dev
    spec, root = project
    assert watched_paths(spec) == [root]
    first_url = runtime.provisioned.queues["first"].url
    # Delayed: no worker receives it before, during or after the reload.
    aws.sqs.send_message(QueueUrl=first_url, MessageBody="kept across the reload", DelaySeconds=900)
    (root / "second.py").write_text(textwrap.dedent(SECOND_JOB))
    (root / "topology.py").write_text(textwrap.dedent(TOPOLOGY_V2.format(package=root.name)))
    said: list[str] = []

    Reloader(runtime, spec, grace_s=STOP_S, say=said.append).follow([{(Change.added, str(root / "second.py"))}])

    assert said == [
        "conveyor: second.py changed; reloading",
        "conveyor: reloaded; workers restarted, new queues second",
    ]
    assert aws.sqs.get_queue_url(QueueName=naming.queue_name("second"))["QueueUrl"] == (
        runtime.provisioned.queues["second"].url
    )
    assert runtime.provisioned.queues["first"].url == first_url
    attributes = aws.sqs.get_queue_attributes(QueueUrl=first_url, AttributeNames=["ApproximateNumberOfMessagesDelayed"])
    assert attributes["Attributes"]["ApproximateNumberOfMessagesDelayed"] == "1"
    client = JobClient(runtime.topology, sqs_client=aws.sqs)
    second = client.enqueue("second_greeting", {"name": "Ann"})
    first = client.enqueue("first_note", {"text": "still running"})
    wait_until(lambda: succeeded(observed, second), "the new queue's job ran on the reloaded workers")
    wait_until(lambda: succeeded(observed, first), "the old queue's jobs still run")


def test_code_that_fails_to_import_is_one_line_and_the_workers_go_on(
    aws: LocalAws, dev: tuple[LocalRuntime, Observed], project: tuple[str, Path]
) -> None:
    runtime, observed = dev
    spec, root = project
    (root / "topology.py").write_text(textwrap.dedent(TOPOLOGY_V1) + "\nNOTE = undefined_name\n")
    said: list[str] = []

    assert not Reloader(runtime, spec, grace_s=STOP_S, say=said.append).reload()

    (line,) = said
    assert line.startswith(f"conveyor: reload failed ({root / 'topology.py'}:")
    assert "NameError: name 'undefined_name' is not defined" in line
    assert line.endswith("the workers run the previous code")
    job_id = JobClient(runtime.topology, sqs_client=aws.sqs).enqueue("first_note", {"text": "after"})
    wait_until(lambda: succeeded(observed, job_id), "the previous workers still run jobs")


def _ctrl_c(seconds: float) -> None:
    raise KeyboardInterrupt


def test_tail_follows_the_running_runtimes_job_events_through_the_embedded_cloudwatch_logs(
    aws: LocalAws,
    dev: tuple[LocalRuntime, Observed],
    project: tuple[str, Path],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    runtime, observed = dev
    job_id = JobClient(runtime.topology, sqs_client=aws.sqs).enqueue("first_note", {"text": "tailed"})
    wait_until(lambda: succeeded(observed, job_id), "the job ran")
    groups = list(worker_log_groups(runtime.topology).values())
    since = datetime.now(UTC) - timedelta(minutes=5)

    def shipped() -> list[dict[str, Any]]:
        return next(follow(runtime.logs, groups, TailFilter(job_id=job_id), since=since, sleep=lambda _: None))

    wait_until(shipped, "the runtime shipped the job's event to the embedded CloudWatch Logs")
    monkeypatch.setattr(tail_command, "sleep", _ctrl_c)
    with pytest.raises(SystemExit) as exited:
        main(["--topology", project[0], "tail", "--job", job_id[:8], "--log-format", "json"])
    out = capsys.readouterr().out
    assert exited.value.code == 130
    events = [JobEvent.of(json.loads(line)) for line in out.splitlines()]
    assert [(e.job_id, e.outcome, e.queue) for e in events if e] == [(job_id, "succeeded", "first")]


def test_after_a_reload_the_relay_reads_the_outbox_on_and_does_not_replay_it(
    aws: LocalAws, dev: tuple[LocalRuntime, Observed], project: tuple[str, Path]
) -> None:
    runtime, observed = dev
    spec, _ = project
    client = JobClient(runtime.topology, sqs_client=aws.sqs, dynamodb_client=aws.dynamodb)
    (before,) = client.transact([], [JobRequest("first_note", {"text": "through the outbox"})])
    wait_until(lambda: succeeded(observed, before), "the relayed job ran")

    assert Reloader(runtime, spec, grace_s=STOP_S, say=lambda line: None).reload()

    (after,) = client.transact([], [JobRequest("first_note", {"text": "after the reload"})])
    wait_until(lambda: succeeded(observed, after), "a job written after the reload was relayed")
    # A replay from the stream's start would have sent `before` again, ahead of `after`: by now it would have run.
    first = runtime.provisioned.queues["first"].url
    wait_until(
        lambda: queue_depth(aws.sqs, first).total == 0 and runtime.pollers["first"].stats.in_flight == 0,
        "the queue is drained",
    )
    with observed.lock:
        runs = [o.kind for o in observed.outcomes if o.job_id == before]
    assert runs == [Kind.SUCCEEDED]
