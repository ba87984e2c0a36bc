"""The Celery row: the same no-op jobs through Celery on kombu's SQS transport, on the same endpoint.

What a team would run instead of Conveyor: a Celery worker (threads pool, concurrency 5, as a
Conveyor queue's pollers) consuming an SQS queue, tasks acknowledged late (deleted after they
ran, as Conveyor deletes a job once it succeeded). Celery does no idempotency: a task delivered
twice runs twice.

Requests are counted by botocore event hooks, but not by the usual ones: kombu sends
SendMessage and DeleteMessage through botocore, and ReceiveMessage through its own pycurl client
(kombu.asynchronous.aws.sqs.connection), which botocore never sends, so ``before-send``,
``before-parameter-build`` and ``after-call`` never see it. kombu signs that request with the
botocore client's own signer, though, which emits ``before-sign``: one per request on either
path (botocore signs each retry anew). ``before-sign`` counts them all, ``before-send`` the ones
botocore sent. No proxy in front of the endpoint: an extra hop would slow Celery's side only.

The worker is a subprocess running this module (``python -m bench.celery_sqs``); it reports
on a pipe when it first polls and, at the last task's DeleteMessage, what it has sent.
"""

import importlib.util
import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http import HTTPStatus
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlsplit

import boto3
from botocore.handlers import BUILTIN_HANDLERS

from bench.skipped import CannotRunError
from conveyor.local.embedded import LOCAL_CREDENTIALS, REGION

TASK_NAME = "bench.noop"
CONCURRENCY = 5
ROOT = Path(__file__).resolve().parents[1]
# Celery's import and start on a loaded 2-core machine take seconds; this is the give-up point.
READY_TIMEOUT_S = 60.0
# Generous: a run far slower than this is broken, not slow.
MIN_RUN_TIMEOUT_S = 60.0
RUN_TIMEOUT_PER_TASK_S = 0.25
STOP_TIMEOUT_S = 15.0
LOG_TAIL_CHARS = 2000
READY, DONE = "ready", "done"


class _Requests:
    """AWS requests by ``service.Operation``: all that were signed, and those botocore sent itself."""

    def __init__(self) -> None:
        self.signed: Counter[str] = Counter()
        self.sent_by_botocore: Counter[str] = Counter()
        self._lock = threading.Lock()
        self.handlers: list[tuple[str, Callable[..., None]]] = [
            ("before-sign", self._on_sign),
            ("before-send", self._on_send),
        ]

    def _on_sign(self, event_name: str, **_: Any) -> None:
        with self._lock:
            self.signed[_operation(event_name)] += 1

    def _on_send(self, event_name: str, **_: Any) -> None:
        with self._lock:
            self.sent_by_botocore[_operation(event_name)] += 1

    def attach(self, client: Any) -> None:
        for event, handler in self.handlers:
            client.meta.events.register(event, handler)

    def to_json(self) -> dict[str, dict[str, int]]:
        with self._lock:
            return {"signed": dict(self.signed), "sent_by_botocore": dict(self.sent_by_botocore)}


def _operation(event_name: str) -> str:
    """``sqs.ReceiveMessage`` from ``before-sign.sqs.ReceiveMessage``."""
    _, service, operation = event_name.split(".", 2)
    return f"{service}.{operation}"


def _celery_app(endpoint_url: str, queue: str, queue_url: str) -> Any:
    """A Celery app on kombu's SQS transport, the queue predefined (no ListQueues, no CreateQueue).

    kombu takes the endpoint from the broker URL's host, not from a transport option.
    """
    from celery import Celery

    app = Celery("bench", broker=f"sqs://{urlsplit(endpoint_url).netloc}", set_as_current=False)
    app.conf.update(
        broker_transport_options={
            "region": REGION,
            "is_secure": endpoint_url.startswith("https:"),
            "predefined_queues": {
                queue: {
                    "url": queue_url,
                    "access_key_id": LOCAL_CREDENTIALS["AWS_ACCESS_KEY_ID"],
                    "secret_access_key": LOCAL_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
                }
            },
        },
        broker_connection_retry_on_startup=True,
        task_default_queue=queue,
        task_acks_late=True,
        task_serializer="json",
        accept_content=["json"],
        worker_enable_remote_control=False,
        worker_hijack_root_logger=False,
    )
    return app


def noop(n: int) -> None:
    """The task: nothing, as Conveyor's bench_noop job, so the row measures Celery and kombu."""


def _versions() -> tuple[str, str]:
    """Celery's and kombu's versions, or CannotRunError when the `bench` extra is not installed."""
    try:
        import celery
        import kombu
    except ImportError as error:
        raise CannotRunError(f"Celery is not installed ({error}): pip install -e '.[bench]'") from error
    # kombu's HTTP client for SQS receives: without it the worker cannot poll.
    if importlib.util.find_spec("pycurl") is None:
        raise CannotRunError(
            "pycurl, which kombu's SQS transport receives with, is not installed: pip install -e '.[bench]'"
        )
    return str(celery.__version__), str(kombu.__version__)


class _Worker:
    """The Celery worker as its own process, and what it reports on its pipe."""

    def __init__(self, process: "subprocess.Popen[bytes]", reports: IO[bytes], log: IO[bytes]) -> None:
        self.process = process
        self._log = log
        self._reports: queue.Queue[dict[str, Any]] = queue.Queue()
        threading.Thread(target=self._read, args=(reports,), name="bench-celery-reports", daemon=True).start()

    def _read(self, reports: IO[bytes]) -> None:
        with reports:
            for line in reports:
                self._reports.put(json.loads(line))

    def wait(self, event: str, timeout_s: float, failure: Callable[[], str]) -> dict[str, Any]:
        """The worker's report of ``event``; CannotRunError, with the worker's log, if it exits or times out first."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                report = self._reports.get(timeout=0.1)
            except queue.Empty:
                if self.process.poll() is not None:
                    raise CannotRunError(
                        f"the Celery worker exited with code {self.process.returncode}; {self._tail()}"
                    ) from None
                continue
            if report["event"] == event:
                return report
        raise CannotRunError(f"{failure()}; {self._tail()}")

    def _tail(self) -> str:
        self._log.seek(0)
        return f"worker log: {self._log.read().decode(errors='replace')[-LOG_TAIL_CHARS:]}"


@contextmanager
def _worker(endpoint_url: str, queue: str, queue_url: str, tasks: int, log: IO[bytes]) -> Iterator[_Worker]:
    """Start the worker (``__main__`` below); stopped with SIGTERM, Celery's warm shutdown, afterwards."""
    python_path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    read_fd, write_fd = os.pipe()
    reports = os.fdopen(read_fd, "rb")
    try:
        process = subprocess.Popen(  # noqa: S603 - this interpreter, this module, arguments of our own
            [sys.executable, "-m", "bench.celery_sqs", endpoint_url, queue, queue_url, str(tasks), str(write_fd)],
            env={**os.environ, "PYTHONPATH": python_path},
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            pass_fds=(write_fd,),
        )
    except BaseException:
        reports.close()
        raise
    finally:
        os.close(write_fd)
    try:
        yield _Worker(process, reports, log)
    finally:
        process.terminate()
        try:
            process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _per_task(counts: Counter[str], tasks: int) -> dict[str, float]:
    return {operation: count / tasks for operation, count in sorted(counts.items())}


def _note(celery: str, kombu: str, signed: Counter[str], sent_by_botocore: Counter[str]) -> str:
    own_client = sorted(operation for operation, count in signed.items() if count > sent_by_botocore[operation])
    return (
        f"Celery {celery}, kombu {kombu} SQS transport; worker --pool threads --concurrency {CONCURRENCY}, tasks "
        "acked late (deleted after running), kombu's defaults otherwise (10 s long polls, 1 s after an empty one). "
        "Celery does no idempotency: a task delivered twice runs twice. Requests counted by botocore's before-sign "
        "hook in the producer and the worker, from worker start to the last task's DeleteMessage: kombu sends "
        f"{', '.join(own_client) or 'nothing'} through its own pycurl client, which botocore signs but never sends, "
        "so the usual before-send or after-call hooks would miss them."
    )


def measure(endpoint_url: str, *, tasks: int) -> dict[str, object]:
    """Enqueue ``tasks`` no-op tasks with Celery's producer and time a Celery worker running them all.

    tasks/s runs from the first send to the last task's DeleteMessage; the worker is started
    and polling before the first send, so its start-up is not timed (its requests are counted).
    """
    if tasks < 1:
        raise ValueError(f"tasks must be at least 1, not {tasks}")
    celery, kombu = _versions()
    sqs = boto3.client(
        "sqs",
        endpoint_url=endpoint_url,
        region_name=REGION,
        aws_access_key_id=LOCAL_CREDENTIALS["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=LOCAL_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        aws_session_token=LOCAL_CREDENTIALS["AWS_SESSION_TOKEN"],
    )
    name = f"bench-celery-{uuid.uuid4().hex[:12]}"
    queue_url = sqs.create_queue(QueueName=name)["QueueUrl"]
    producer_requests = _Requests()
    try:
        with tempfile.TemporaryFile() as log, _worker(endpoint_url, name, queue_url, tasks, log) as worker:
            worker.wait(
                READY, READY_TIMEOUT_S, lambda: f"the Celery worker did not poll SQS in {READY_TIMEOUT_S:.0f} s"
            )
            with _celery_app(endpoint_url, name, queue_url) as app, app.producer_or_acquire() as producer:
                producer_requests.attach(producer.connection.default_channel.sqs(queue=name))
                started = time.monotonic()
                for n in range(tasks):
                    app.send_task(TASK_NAME, kwargs={"n": n}, producer=producer)
                timeout_s = max(MIN_RUN_TIMEOUT_S, tasks * RUN_TIMEOUT_PER_TASK_S)
                done = worker.wait(DONE, timeout_s, lambda: f"Celery did not finish {tasks} tasks in {timeout_s:.0f} s")
                seconds = time.monotonic() - started
    finally:
        sqs.delete_queue(QueueUrl=queue_url)
    signed = Counter(done["signed"]) + producer_requests.signed
    sent_by_botocore = Counter(done["sent_by_botocore"]) + producer_requests.sent_by_botocore
    return {
        "tasks_per_s": tasks / seconds,
        "requests_per_task": _per_task(signed, tasks),
        "note": _note(celery, kombu, signed, sent_by_botocore),
    }


class _Reporter:
    """The worker's side of the pipe: READY at its first poll; DONE, with its requests, at the last task's delete."""

    def __init__(self, tasks: int, pipe: IO[str]) -> None:
        self.requests = _Requests()
        self._tasks = tasks
        self._pipe = pipe
        self._lock = threading.Lock()
        self._polled = False
        self._deleted = 0
        self.handlers = [
            *self.requests.handlers,
            ("before-sign.sqs.ReceiveMessage", self._on_receive),
            ("after-call.sqs.DeleteMessage", self._on_delete),
        ]

    def _send(self, event: str, **details: Any) -> None:
        self._pipe.write(json.dumps({"event": event, **details}) + "\n")
        self._pipe.flush()

    def _on_receive(self, **_: Any) -> None:
        with self._lock:
            if not self._polled:
                self._polled = True
                self._send(READY)

    def _on_delete(self, http_response: Any, **_: Any) -> None:
        """kombu acks a task with one DeleteMessage (Channel.basic_ack): the tasks-th is the last task done."""
        if http_response.status_code != HTTPStatus.OK:
            return
        with self._lock:
            self._deleted += 1
            if self._deleted == self._tasks:
                self._send(DONE, **self.requests.to_json())


def _run_worker(endpoint_url: str, queue: str, queue_url: str, tasks: str, pipe_fd: str) -> None:
    """The worker process: the app with the no-op task, consuming ``queue`` until SIGTERM.

    The hooks go into botocore's BUILTIN_HANDLERS, which each new botocore session copies: kombu
    makes its own sessions, and this process is the worker's alone.
    """
    with os.fdopen(int(pipe_fd), "w") as pipe:
        BUILTIN_HANDLERS.extend(_Reporter(int(tasks), pipe).handlers)
        app = _celery_app(endpoint_url, queue, queue_url)
        app.task(name=TASK_NAME)(noop)
        app.worker_main(
            [
                "worker",
                "--pool=threads",
                f"--concurrency={CONCURRENCY}",
                f"--queues={queue}",
                "--without-heartbeat",
                "--without-gossip",
                "--without-mingle",
                "--loglevel=WARNING",
            ]
        )


if __name__ == "__main__":
    _run_worker(*sys.argv[1:])
