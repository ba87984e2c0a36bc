"""The local runtime end to end, as an operator runs it: `conveyor local up|work`, real processes, real signals.

What these prove is what users rely on: a worker killed mid-batch loses no job and charges no
order twice; a job that keeps failing ends in the DLQ with its reason; a duplicate delivery
causes no second effect; SIGTERM drains and leaves nothing behind; a taken port is one line.
Workers run as `conveyor` processes from the console script, each in the test's own directory.
"""

import json
import os
import signal
import socket
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import boto3
import pytest

from conveyor.contract import message_attributes as attrs
from conveyor.contract import naming
from conveyor.contract.envelope import Envelope, new_job_id
from conveyor.contract.reasons import Reason
from conveyor.local.demo import queue_depth
from conveyor.local.embedded import LOOPBACK, REGION, free_port
from conveyor.sdk.client import JobClient
from conveyor.sdk.prepare import JobRequest
from conveyor.worker.outcomes import Kind
from functions.providers.effects import Effect
from tests.e2e.conftest import (
    InProcess,
    LocalAws,
    accepts_connections,
    jobs_process,
    linux_only,
    point_at,
    port_is_free,
    run_jobs,
    send_to_thread,
    wait_until,
)
from tests.fixtures.e2e_topology import ALWAYS_FAILS_ATTEMPTS, QUEUE, TOPOLOGY, charge_key, record_key

SLOW_CHARGES = 12
# Half before the charge, half after: the second half is the window where the effect has
# happened but the message is not yet acknowledged, which a crash must not turn into a second charge.
HALF_JOB_MS = 250


def _charge(order_id: str, amount_cents: int, half_ms: int = HALF_JOB_MS) -> JobRequest:
    payload = {"order_id": order_id, "amount_cents": amount_cents, "before_ms": half_ms, "after_ms": half_ms}
    return JobRequest("slow_charge", payload)


def _charged(aws: LocalAws, orders: list[str]) -> list[str]:
    effects = aws.effects()
    return [order for order in orders if charge_key(order) in effects and effects[charge_key(order)].applied]


def test_worker_killed_mid_batch_loses_nothing(aws: LocalAws, tmp_path: Path) -> None:
    orders = [f"order-{index:02d}" for index in range(SLOW_CHARGES)]
    aws.enqueue_many([_charge(order, 100 + index) for index, order in enumerate(orders)])

    with jobs_process("work", "--endpoint", aws.endpoint, workdir=tmp_path / "first") as first:
        wait_until(lambda: first.running() and _charged(aws, orders), "the first worker has charged an order")
        first.kill()  # kill -9: no drain, batches in flight stay invisible until their visibility lapses
    left = aws.depth(aws.queue_url)
    assert left.total > 0, f"the worker finished every job before it was killed, so nothing was tested: {left}"

    with jobs_process("work", "--endpoint", aws.endpoint, workdir=tmp_path / "second") as second:
        wait_until(
            lambda: second.running() and aws.is_empty(aws.queue_url) and len(_charged(aws, orders)) == len(orders),
            "a second worker has charged every order and emptied the queue",
        )

    effects = aws.effects()
    assert {order: effects[charge_key(order)].applied for order in orders} == dict.fromkeys(orders, 1)
    assert aws.depth(aws.queue_url).total == 0
    assert aws.depth(aws.dlq_url).total == 0


def test_message_that_keeps_failing_reaches_the_dlq_with_its_reason(aws: LocalAws, runtime: InProcess) -> None:
    (job_id,) = aws.enqueue_many([JobRequest("always_fails", {"note": "fails every time"})])

    wait_until(
        lambda: aws.depth(aws.dlq_url).visible == 1 and aws.is_empty(aws.queue_url),
        "the job is on the DLQ and gone from its queue",
    )

    (letter,) = aws.receive_all(aws.dlq_url)
    attributes = {name: value["StringValue"] for name, value in letter["MessageAttributes"].items()}
    assert attributes[attrs.REASON] == Reason.ATTEMPTS_EXHAUSTED.value
    assert attributes[attrs.ATTEMPTS] == str(ALWAYS_FAILS_ATTEMPTS)
    assert attributes[attrs.JOB_TYPE] == "always_fails"
    assert attributes[attrs.JOB_ID] == job_id
    assert attributes[attrs.SOURCE_QUEUE] == QUEUE
    assert attributes[attrs.ERROR_CLASS] == "RetryableError"
    assert letter["Body"] == aws.sent[job_id], "the DLQ body must be the envelope as enqueued, byte for byte"
    runs = [(outcome.attempt, outcome.kind) for outcome in runtime.observed.outcomes if outcome.job_id == job_id]
    assert runs == [(1, Kind.RETRIED), (2, Kind.RETRIED), (3, Kind.DEAD_LETTERED)]


def test_redelivered_message_causes_no_second_effect(aws: LocalAws, runtime: InProcess) -> None:
    job_id = new_job_id()
    body = Envelope(
        type="record_effect", v=1, id=job_id, created_at=datetime.now(UTC), data={"name": "delivered-twice"}
    ).to_json()
    aws.send_raw(body)
    aws.send_raw(body)  # the same message again, as SQS at-least-once delivery (or a redrive) hands it out

    def both_finished() -> bool:
        terminal = [
            o for o in runtime.observed.outcomes if o.job_id == job_id and o.kind in {Kind.SUCCEEDED, Kind.DUPLICATE}
        ]
        return len(terminal) == 2 and aws.is_empty(aws.queue_url)

    wait_until(both_finished, "both deliveries are done and acknowledged")

    # The provider does not dedupe: one call and one effect means the duplicate never reached it.
    assert aws.effect(record_key("delivered-twice")) == Effect(calls=1, applied=1)
    # Run at once, the second copy finds the key in progress and is snoozed, not failed, before it is absorbed.
    kinds = [o.kind for o in runtime.observed.outcomes if o.job_id == job_id]
    assert sorted(kind for kind in kinds if kind is not Kind.SNOOZED) == sorted([Kind.SUCCEEDED, Kind.DUPLICATE])
    assert aws.depth(aws.dlq_url).total == 0


def _queue_url(sqs: Any) -> str | None:
    try:
        return str(sqs.get_queue_url(QueueName=naming.queue_name(QUEUE))["QueueUrl"])
    except sqs.exceptions.QueueDoesNotExist:
        return None


def _succeeded_job_ids(worker_stdout: str) -> set[str]:
    """Job ids of the "job succeeded" lines in the workers' JSON logs."""
    ids = set()
    for line in worker_stdout.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and entry.get("message") == "job succeeded":
            ids.add(str(entry.get("job_id")))
    return ids


@linux_only
def test_sigterm_drains_and_leaves_nothing_running(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    port = free_port()
    endpoint = f"http://{LOOPBACK}:{port}"
    point_at(monkeypatch, endpoint)
    sqs = boto3.client("sqs", endpoint_url=endpoint, region_name=REGION)

    with jobs_process("up", "--port", str(port), workdir=tmp_path) as up:
        wait_until(lambda: up.running() and accepts_connections(port), "the embedded AWS accepts connections")

        def provisioned_queue() -> str | None:
            up.running()
            return _queue_url(sqs)

        queue_url = wait_until(provisioned_queue, "the declared queue exists")
        wait_until(up.ready, "`conveyor local up` runs its workers and handles SIGTERM")
        (job_id,) = JobClient(TOPOLOGY, sqs_client=sqs).enqueue_many([_charge("order-drained", 100, half_ms=500)])
        wait_until(lambda: up.running() and queue_depth(sqs, queue_url).in_flight == 1, "a worker holds the job")

        code = up.terminate()
        out, err = up.output()

    assert code == 0, up.describe()
    assert "conveyor: draining" in err, up.describe()
    assert "left to return" not in err, up.describe()
    assert job_id in _succeeded_job_ids(out), f"the job in flight at SIGTERM did not finish: {up.describe()}"
    assert port_is_free(port), f"port {port} is still bound after `conveyor local up` exited"


@linux_only
def test_sigterm_stops_the_workers_whichever_thread_receives_it(aws: LocalAws, tmp_path: Path) -> None:
    with jobs_process("work", "--endpoint", aws.endpoint, workdir=tmp_path) as work:
        wait_until(work.ready, "`conveyor local work` runs its workers and handles SIGTERM")
        main_thread, *other_threads = work.threads()
        assert main_thread == work.pid
        assert other_threads, "no worker threads to receive the signal"
        # A process-wide SIGTERM goes to whichever thread the kernel picks; here, the first poller.
        send_to_thread(work.pid, other_threads[0], signal.SIGTERM)

        wait_until(lambda: work.process.poll() is not None, "`conveyor local work` exits after SIGTERM")
        _, err = work.output()

    assert work.process.returncode == 0, work.describe()
    assert "conveyor: draining" in err, work.describe()


def test_port_in_use_is_one_line_and_nonzero(tmp_path: Path) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.bind((LOOPBACK, 0))
        holder.listen()
        port = int(holder.getsockname()[1])
        result = run_jobs("up", "--port", str(port), workdir=tmp_path)

    assert result.returncode == 1, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"conveyor: port {port}"), result.stderr
    # The holder is this test's process: named from /proc, so the operator knows what to stop.
    assert f"held by pid {os.getpid()} (" in lines[0], result.stderr
