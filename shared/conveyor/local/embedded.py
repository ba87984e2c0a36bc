"""moto in server mode on 127.0.0.1: the embedded AWS other processes reach over HTTP."""

import logging
import socket
from typing import Any

from conveyor.errors import ConveyorError

LOOPBACK = "127.0.0.1"
DEFAULT_PORT = 4566


class LocalRuntimeError(ConveyorError):
    """The local runtime cannot start; the message says why in one line."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((LOOPBACK, 0))
        return int(probe.getsockname()[1])


def _check_port(port: int) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((LOOPBACK, port))
        except OSError as error:
            raise LocalRuntimeError(
                f"port {port} on {LOOPBACK} is in use ({error.strerror}); stop what holds it or pass --port"
            ) from error


class EmbeddedAws:
    """Start with ``start()``; ``endpoint_url`` is what AWS_ENDPOINT_URL should point at."""

    def __init__(self, port: int = DEFAULT_PORT) -> None:
        self.port = port
        self._server: Any = None

    @property
    def endpoint_url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    def start(self) -> None:
        # Checked first: moto's server thread would otherwise wait forever on a taken port.
        _check_port(self.port)
        try:
            # Imported here: moto is a development dependency, and `jobs` runs without it in production.
            from moto.server import ThreadedMotoServer
        except ImportError as error:
            raise LocalRuntimeError(
                f"the local runtime needs moto ({error}); install it with: pip install 'conveyor[local]'"
            ) from error
        logging.getLogger("werkzeug").setLevel(logging.ERROR)
        self._server = ThreadedMotoServer(ip_address=LOOPBACK, port=self.port, verbose=False)
        self._server.start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None
