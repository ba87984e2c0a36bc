"""moto in server mode on 127.0.0.1: the embedded AWS other processes reach over HTTP.

moto's server app sits behind conveyor.local.strict's gateway, so every request, from any
process, is held to AWS's limits (``strict=False`` drops them), and moto is made to behave under
concurrent requests as AWS does (conveyor.local.moto_concurrency).
"""

import logging
import socket
import threading
from typing import Any

import boto3

from conveyor.contract.errors import ConveyorError
from conveyor.local import moto_concurrency
from conveyor.local.gateway import StrictGateway
from conveyor.local.move_tasks import MoveTasks
from conveyor.local.port_owner import port_owner
from conveyor.local.sqs_metrics import SqsMetricsPublisher

LOOPBACK = "127.0.0.1"
DEFAULT_PORT = 4566
REGION = "us-east-1"
# Credentials for the embedded endpoint only; real ones are never needed or sent.
LOCAL_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "local", "AWS_SECRET_ACCESS_KEY": "local", "AWS_SESSION_TOKEN": "local"}


class LocalRuntimeError(ConveyorError):
    """The local runtime cannot start; the message says why in one line."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((LOOPBACK, 0))
        return int(probe.getsockname()[1])


def _port_in_use(port: int, error: OSError) -> LocalRuntimeError:
    owner = port_owner(port)
    held = f"held by {owner}" if owner else error.strerror
    return LocalRuntimeError(f"port {port} on {LOOPBACK} is in use ({held}); stop what holds it or pass --port")


def _check_port(port: int) -> None:
    """Is another server listening there? Probed as the server binds (SO_REUSEADDR, which werkzeug's
    server sets too), so the closed connections of a runtime that just stopped (TIME_WAIT) do not
    count as a port in use: `conveyor local up` restarts at once after Ctrl-C."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((LOOPBACK, port))
        except OSError as error:
            raise _port_in_use(port, error) from error


class EmbeddedAws:
    """Start with ``start()``; ``endpoint_url`` is what AWS_ENDPOINT_URL should point at."""

    def __init__(self, port: int = DEFAULT_PORT, *, strict: bool = True) -> None:
        self.port = port
        self.strict = strict
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self._move_tasks: MoveTasks | None = None
        self._metrics: SqsMetricsPublisher | None = None

    @property
    def endpoint_url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    def start(self) -> None:
        # Checked first: moto's server thread would otherwise wait forever on a taken port.
        _check_port(self.port)
        try:
            # Imported here: moto is a development dependency, and `conveyor` runs without it in production.
            from moto.moto_server.werkzeug_app import (
                DomainDispatcherApplication,
                MotoRequestHandler,
                create_backend_app,
            )
            from werkzeug.serving import make_server
        except ImportError as error:
            raise LocalRuntimeError(
                f"the local runtime needs moto ({error}); install it with: pip install 'conveyor[local]'"
            ) from error
        logging.getLogger("werkzeug").setLevel(logging.ERROR)
        moto_concurrency.install()
        self._move_tasks = MoveTasks(self.client("sqs"))
        gateway = StrictGateway(
            DomainDispatcherApplication(create_backend_app), move_tasks=self._move_tasks, strict=self.strict
        )
        try:
            self._server = make_server(LOOPBACK, self.port, gateway, threaded=True, request_handler=MotoRequestHandler)
        except OSError as error:  # taken since the check
            raise _port_in_use(self.port, error) from error
        self._thread = threading.Thread(target=self._server.serve_forever, name="embedded-aws", daemon=True)
        self._thread.start()
        self._metrics = SqsMetricsPublisher(self.client("cloudwatch"))
        self._metrics.start()

    def client(self, service: str) -> Any:
        """A client for this endpoint, whatever the process's own AWS configuration says."""
        return boto3.client(  # type: ignore[call-overload]
            service,
            endpoint_url=self.endpoint_url,
            region_name=REGION,
            aws_access_key_id=LOCAL_CREDENTIALS["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=LOCAL_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
            aws_session_token=LOCAL_CREDENTIALS["AWS_SESSION_TOKEN"],
        )

    def stop(self) -> None:
        if self._metrics is not None:
            self._metrics.stop()
            self._metrics = None
        if self._move_tasks is not None:
            self._move_tasks.stop()
            self._move_tasks = None
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join()
            self._thread = None
