"""The request a job comes from, carried in a context variable so producers need not pass it.

A web framework middleware calls ``correlated(request_id=...)`` once per request; every job
enqueued inside carries that correlation, and every log line of the job's run shows it.
"""

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from conveyor.contract.envelope import Correlation

_current: ContextVar[Correlation] = ContextVar("conveyor_correlation", default=Correlation())  # noqa: B039 - frozen model


def current_correlation() -> Correlation:
    """The correlation jobs enqueued here will carry: the innermost ``correlated`` block's, else empty."""
    return _current.get()


@contextmanager
def correlated(
    *, request_id: str | None = None, origin: str | None = None, actor: str | None = None
) -> Iterator[Correlation]:
    """Set correlation for the block; fields left out keep the enclosing block's values."""
    outer = _current.get()
    correlation = Correlation(
        request_id=request_id or outer.request_id,
        origin=origin or outer.origin,
        actor=actor or outer.actor,
    )
    token = _current.set(correlation)
    try:
        yield correlation
    finally:
        _current.reset(token)
