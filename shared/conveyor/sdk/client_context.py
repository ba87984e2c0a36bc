"""The client a job's ``enqueue`` uses when none is passed: one per process, overridden per context.

Producers call ``charge_order.enqueue(...)`` without threading a client through their code; a
test (conveyor.testing) or a tool that must enqueue elsewhere wraps the calls in ``using_client``.
"""

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from functools import cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from conveyor.sdk.client import JobClient

_override: ContextVar["JobClient | None"] = ContextVar("conveyor_job_client", default=None)


@cache
def _process_client() -> "JobClient":
    # Imported here: a worker whose jobs never enqueue must not load the client at cold start.
    from conveyor.sdk.client import JobClient

    return JobClient()


def default_client() -> "JobClient":
    """The innermost ``using_client`` block's client, else the process's own, built on first use.

    The process's client reads the project's topology (conveyor.contract.loader) and uses boto3's
    default clients, so AWS_ENDPOINT_URL points it at the local runtime.
    """
    client = _override.get()
    return _process_client() if client is None else client


@contextmanager
def using_client(client: "JobClient") -> Iterator["JobClient"]:
    """Send the block's ``enqueue`` calls that name no client through ``client``: ``with using_client(c): ...``."""
    token = _override.set(client)
    try:
        yield client
    finally:
        _override.reset(token)
