"""The embedded AWS as a dev server binds: it restarts at once on its port, and a taken port names its holder."""

import os
import socket

import boto3
import pytest

from conveyor.local.embedded import LOOPBACK, REGION, EmbeddedAws, LocalRuntimeError, free_port
from conveyor.local.port_owner import port_owner


def _talk_to(server: EmbeddedAws) -> None:
    """Requests over kept-alive connections, which the server closes when it stops (TIME_WAIT on its port)."""
    sqs = boto3.client("sqs", endpoint_url=server.endpoint_url, region_name=REGION)
    sqs.create_queue(QueueName="restart-probe")
    sqs.list_queues()


def test_it_restarts_on_the_same_port_right_after_stopping() -> None:
    server = EmbeddedAws(free_port())
    server.start()
    _talk_to(server)
    server.stop()
    again = EmbeddedAws(server.port)
    again.start()  # no "address in use": the closed connections do not hold the port
    try:
        _talk_to(again)
    finally:
        again.stop()


def test_a_port_another_process_listens_on_is_one_line_naming_it() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.bind((LOOPBACK, 0))
        holder.listen()
        port = int(holder.getsockname()[1])
        owner = port_owner(port)
        assert owner is not None
        assert owner.startswith(f"pid {os.getpid()} (")
        with pytest.raises(LocalRuntimeError) as refused:
            EmbeddedAws(port).start()
    message = str(refused.value)
    assert message.startswith(f"port {port} on {LOOPBACK} is in use (held by pid {os.getpid()} (")
    assert message.endswith("stop what holds it or pass --port")
    assert "\n" not in message


def test_a_port_nobody_listens_on_has_no_owner() -> None:
    assert port_owner(free_port()) is None
