"""The local platform for end-to-end tests: an embedded AWS on 127.0.0.1, workers in or out of process.

Each test gets a fresh moto server on a free port, the declared queues and tables provisioned,
and an environment pointing every boto3 client at it (restored afterwards). Nothing waits a
fixed time: tests poll until what they expect holds, or fail after a generous timeout. A test
module runs another topology by overriding the ``topology`` fixture (and passing its spec to
``jobs_process``).
"""

import ctypes
import http.client
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO, TypeVar

import boto3
import pytest
from click.testing import CliRunner

from conveyor.cli.main import main
from conveyor.contract import naming
from conveyor.contract.topology import Topology
from conveyor.local.demo import Observed, QueueDepth, queue_depth
from conveyor.local.embedded import LOOPBACK, REGION, EmbeddedAws, free_port
from conveyor.local.provision import Provisioned, provision
from conveyor.local.runtime import LocalRuntime, local_environment
from conveyor.sdk.client import JobClient
from conveyor.sdk.outbox import OUTBOX_TABLE_ENV
from conveyor.sdk.prepare import JobRequest
from functions.providers.effects import EFFECTS_TABLE, KEY_ATTRIBUTE, Effect, EffectsLedger
from tests.fixtures.e2e_topology import QUEUE, TOPOLOGY

T = TypeVar("T")

ROOT = Path(__file__).resolve().parents[2]
# The console script of the interpreter running the tests (the project's venv).
JOBS = Path(sys.executable).parent / "conveyor"
TOPOLOGY_SPEC = "tests.fixtures.e2e_topology:TOPOLOGY"
WAIT_S = 60.0
POLL_S = 0.1
STOP_S = 30.0
LOG_TAIL_CHARS = 3000
# How often the in-process workers read pause, resume and concurrency changes (5 s when run for real).
CONTROL_POLL_S = 0.2


def wait_until(
    condition: Callable[[], T | None], what: str, *, timeout_s: float = WAIT_S, interval_s: float = POLL_S
) -> T:
    """Poll ``condition`` until it returns something truthy, and return that; fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout_s:g}s waiting until {what} (last: {value!r})")
        time.sleep(interval_s)


def point_at(monkeypatch: pytest.MonkeyPatch, endpoint: str, topology: Topology = TOPOLOGY) -> None:
    """Aim this process's AWS clients (and the child processes it starts) at ``endpoint`` only."""
    for name, value in local_environment(endpoint).items():
        monkeypatch.setenv(name, value)
    # Never through a proxy: the endpoint is on this machine.
    monkeypatch.setenv("NO_PROXY", f"{LOOPBACK},localhost")
    monkeypatch.setenv("no_proxy", f"{LOOPBACK},localhost")
    # Set by the runtime and the CLI; registered here so the test's end removes them again.
    tables = [naming.table_env(table.name) for table in topology.tables]
    for name in (naming.PREFIX_ENV, *tables, OUTBOX_TABLE_ENV, "CONVEYOR_TOPOLOGY"):
        monkeypatch.delenv(name, raising=False)


def _reset_moto(port: int) -> None:
    """Moto keeps its state per process, not per server: start every test from nothing."""
    connection = http.client.HTTPConnection(LOOPBACK, port, timeout=30)
    try:
        connection.request("POST", "/moto-api/reset")
        response = connection.getresponse()
        response.read()
        assert response.status == http.HTTPStatus.OK, f"moto reset answered {response.status}"
    finally:
        connection.close()


class _RecordingSqs:
    """The SQS client JobClient sends through, keeping each job's body exactly as it was sent."""

    def __init__(self, sqs: Any, sent: dict[str, str]) -> None:
        self._sqs = sqs
        self._sent = sent

    def get_queue_url(self, **request: Any) -> Any:
        return self._sqs.get_queue_url(**request)

    def send_message_batch(self, **request: Any) -> Any:
        response = self._sqs.send_message_batch(**request)
        by_entry = {entry["Id"]: entry["MessageBody"] for entry in request["Entries"]}
        for success in response.get("Successful", []):
            body = by_entry[success["Id"]]
            self._sent[json.loads(body)["id"]] = body
        return response


@dataclass
class LocalAws:
    """The embedded AWS of one test, with the test's topology provisioned on it."""

    endpoint: str
    sqs: Any
    dynamodb: Any
    provisioned: Provisioned
    topology: Topology = TOPOLOGY
    sent: dict[str, str] = field(default_factory=dict)

    @property
    def queue_url(self) -> str:
        return self.provisioned.queues[QUEUE].url

    @property
    def dlq_url(self) -> str:
        return self.provisioned.queues[QUEUE].dlq_url

    def depth(self, url: str) -> QueueDepth:
        return queue_depth(self.sqs, url)

    def is_empty(self, url: str) -> bool:
        return self.depth(url).total == 0

    def enqueue_many(self, requests: Sequence[JobRequest]) -> list[str]:
        """Enqueue through the producer SDK; ``sent[job_id]`` is then the body as it went out."""
        return JobClient(self.topology, sqs_client=_RecordingSqs(self.sqs, self.sent)).enqueue_many(requests)

    def send_raw(self, body: str) -> None:
        """A message straight to the queue, as a duplicate delivery or a redrive puts it there."""
        self.sqs.send_message(QueueUrl=self.queue_url, MessageBody=body)

    def effect(self, key: str) -> Effect | None:
        table = self.provisioned.tables[EFFECTS_TABLE.name]
        return EffectsLedger(table_name=table, client=self.dynamodb).get(key)

    def effects(self) -> dict[str, Effect]:
        """Every effect in the ledger, by effect key (one consistent scan)."""
        table = self.provisioned.tables[EFFECTS_TABLE.name]
        pages = self.dynamodb.get_paginator("scan").paginate(TableName=table, ConsistentRead=True)
        return {
            item[KEY_ATTRIBUTE]["S"]: Effect(
                calls=int(item.get("calls", {"N": "0"})["N"]), applied=int(item.get("applied", {"N": "0"})["N"])
            )
            for page in pages
            for item in page["Items"]
        }

    def receive_all(self, url: str) -> list[dict[str, Any]]:
        """Every message on ``url``, with all attributes; each stays invisible afterwards."""
        messages: list[dict[str, Any]] = []
        while batch := self.sqs.receive_message(
            QueueUrl=url,
            MaxNumberOfMessages=10,
            VisibilityTimeout=300,
            MessageAttributeNames=["All"],
            MessageSystemAttributeNames=["All"],
        ).get("Messages", []):
            messages.extend(batch)
        return messages


@pytest.fixture
def topology() -> Topology:
    """What the embedded AWS provisions and the in-process workers run; a test module may override it."""
    return TOPOLOGY


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch, topology: Topology) -> Iterator[LocalAws]:
    server = EmbeddedAws(free_port())
    server.start()
    try:
        _reset_moto(server.port)
        point_at(monkeypatch, server.endpoint_url, topology)
        sqs = boto3.client("sqs", endpoint_url=server.endpoint_url, region_name=REGION)
        dynamodb = boto3.client("dynamodb", endpoint_url=server.endpoint_url, region_name=REGION)
        provisioned = provision(topology, sqs=sqs, dynamodb=dynamodb)
        yield LocalAws(
            endpoint=server.endpoint_url, sqs=sqs, dynamodb=dynamodb, provisioned=provisioned, topology=topology
        )
    finally:
        server.stop()


@dataclass
class InProcess:
    runtime: LocalRuntime
    observed: Observed


@pytest.fixture
def runtime(aws: LocalAws, tmp_path: Path) -> Iterator[InProcess]:
    """The declared workers running in this process against the test's embedded AWS."""
    observed = Observed()
    local = LocalRuntime(
        aws.topology, endpoint_url=aws.endpoint, observer=observed.record, control_poll_s=CONTROL_POLL_S
    )
    local.start(raw_values=tmp_path / "metrics.jsonl")
    try:
        yield InProcess(runtime=local, observed=observed)
    finally:
        assert local.drain(grace_s=STOP_S), "in-process workers were still running after the grace period"


@dataclass
class JobsProcess:
    """A `conveyor` command running as its own process, its output going to files."""

    process: "subprocess.Popen[bytes]"
    stdout: Path
    stderr: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    def output(self) -> tuple[str, str]:
        return self.stdout.read_text(errors="replace"), self.stderr.read_text(errors="replace")

    def describe(self) -> str:
        out, err = self.output()
        return (
            f"pid {self.pid}, exit {self.process.poll()}\n"
            f"stderr:\n{err[-LOG_TAIL_CHARS:]}\nstdout:\n{out[-LOG_TAIL_CHARS:]}"
        )

    def running(self) -> bool:
        """True while it runs; an unexpected exit fails the test with the process's output."""
        if self.process.poll() is not None:
            raise AssertionError(f"`conveyor` exited unexpectedly: {self.describe()}")
        return True

    def ready(self) -> bool:
        """It handles SIGTERM and its workers run (threads beside the main one)."""
        return self.running() and handles_signal(self.pid, signal.SIGTERM) and len(self.threads()) > 1

    def threads(self) -> list[int]:
        """Its threads' ids, the main thread's (the pid) first."""
        return sorted(int(task.name) for task in Path(f"/proc/{self.pid}/task").iterdir())

    def kill(self) -> None:
        """SIGKILL: no drain, no cleanup, as when a host dies."""
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=STOP_S)

    def terminate(self, timeout_s: float = STOP_S) -> int:
        """SIGTERM to the process, as `kill <pid>` sends it; the exit code once it has exited.

        The kernel hands a process-wide signal to any one thread; the test on SIGTERM's thread
        sends it to a poller thread on purpose.
        """
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=timeout_s)


@contextmanager
def jobs_process(*argv: str, workdir: Path, topology: str = TOPOLOGY_SPEC) -> Iterator[JobsProcess]:
    """Run ``conveyor --topology <topology> local <argv>`` in ``workdir``; the process is gone afterwards."""
    workdir.mkdir(parents=True, exist_ok=True)
    stdout, stderr = workdir / "stdout.log", workdir / "stderr.log"
    with stdout.open("wb") as out, stderr.open("wb") as err:
        process = subprocess.Popen(
            _jobs_command(argv, topology),
            cwd=workdir,
            env=child_environment(PYTHONUNBUFFERED="1"),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
        )
    try:
        yield JobsProcess(process=process, stdout=stdout, stderr=stderr)
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=STOP_S)


def run_jobs(*argv: str, workdir: Path, timeout_s: float = WAIT_S) -> "subprocess.CompletedProcess[str]":
    """Run ``conveyor --topology <e2e> local <argv>`` as its own process in ``workdir``, to completion."""
    workdir.mkdir(parents=True, exist_ok=True)
    return subprocess.run(
        _jobs_command(argv, TOPOLOGY_SPEC),
        cwd=workdir,
        env=child_environment(),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


@dataclass(frozen=True)
class CliRun:
    """What one `conveyor` command printed, and its exit code."""

    exit_code: int
    stdout: str
    stderr: str


class _OwnThreadOutput:
    """sys.stdout or sys.stderr while a command runs in this process.

    The command's thread writes to the command's capture; every other thread (the in-process
    workers printing EMF) goes on writing where it wrote before, as if the command ran apart.
    """

    def __init__(self, command: TextIO, others: TextIO) -> None:
        self._command = command
        self._others = others
        self._thread = threading.get_ident()

    def _stream(self) -> TextIO:
        return self._command if threading.get_ident() == self._thread else self._others

    def write(self, text: str) -> int:
        return self._stream().write(text)

    def flush(self) -> None:
        self._stream().flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream(), name)


def run_cli(*argv: str, workdir: Path) -> CliRun:
    """Run ``conveyor --topology <e2e> <argv>`` in ``workdir`` as an operator's shell would, in this process.

    Through the console script's own entry (``main``: one line and an exit code on error), with
    click's CliRunner isolating stdin, stdout and stderr, and nothing of the process carried over
    from an earlier command: a fresh boto3 session (credentials are looked up again), the
    environment, the import path and the working directory as they were.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    environment = dict(os.environ)
    before_out, before_err = sys.stdout, sys.stderr
    with pytest.MonkeyPatch.context() as patched:
        patched.chdir(workdir)
        patched.setattr(sys, "path", list(sys.path))
        patched.setattr(boto3, "DEFAULT_SESSION", None)
        with CliRunner().isolation() as (out, err, _):
            sys.stdout = _OwnThreadOutput(sys.stdout, before_out)
            sys.stderr = _OwnThreadOutput(sys.stderr, before_err)
            try:
                main(["--topology", TOPOLOGY_SPEC, *argv])
                exit_code = 0
            except SystemExit as exited:
                exit_code = int(exited.code or 0)  # main exits with a number, never a message
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
        _restore(environment)
    return CliRun(exit_code=exit_code, stdout=out.getvalue().decode(), stderr=err.getvalue().decode())


def _restore(environment: dict[str, str]) -> None:
    """Put back the variables a command changed, leaving the others alone (worker threads read them)."""
    for name in set(os.environ) - set(environment):
        del os.environ[name]
    for name, value in environment.items():
        if os.environ.get(name) != value:
            os.environ[name] = value


def _jobs_command(argv: Sequence[str], topology: str) -> list[str]:
    return [str(JOBS), "--topology", topology, "local", *argv]


def child_environment(**extra: str) -> dict[str, str]:
    """This process's environment, with the project importable from any working directory.

    Children run in the test's own directory, not the project's: `conveyor local` keeps files
    under ./.cache (metric values), which must not land in, or be deleted from, the checkout.
    """
    python_path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": python_path, **extra}


def handles_signal(pid: int, signum: int) -> bool:
    """Whether the process has a handler installed for ``signum`` (SigCgt in /proc)."""
    status = Path(f"/proc/{pid}/status").read_text()
    caught = next(line for line in status.splitlines() if line.startswith("SigCgt:"))
    return bool(int(caught.split()[1], 16) & (1 << (signum - 1)))


# tgkill(2): a signal for one thread of a process. Python has no wrapper for another process's thread.
_SYS_TGKILL = {"x86_64": 234, "aarch64": 131}
linux_only = pytest.mark.skipif(
    sys.platform != "linux" or platform.machine() not in _SYS_TGKILL,
    reason="needs /proc and tgkill(2) to observe and direct signals",
)


def send_to_thread(pid: int, tid: int, signum: int) -> None:
    """Send ``signum`` to thread ``tid`` of process ``pid``, as the kernel may route a process-wide signal."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.syscall(_SYS_TGKILL[platform.machine()], pid, tid, signum) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"tgkill({pid}, {tid}, {signum}): {os.strerror(errno)}")


def port_is_free(port: int) -> bool:
    """Free for a new embedded AWS: nothing listens there (connections closing in TIME_WAIT do not count)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((LOOPBACK, port))
        except OSError:
            return False
        return True


def accepts_connections(port: int) -> bool:
    try:
        with socket.create_connection((LOOPBACK, port), timeout=1):
            return True
    except OSError:
        return False
