"""Stop a job that runs past its budget, so one stuck call cannot eat the whole invocation.

Python cannot stop another thread, so the limit is enforced with SIGALRM, which works only
on the main thread (where Lambda runs the handler). Elsewhere the job runs unbounded and
the caller sees the overrun afterwards.
"""

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

from conveyor.contract.errors import JobTimeoutError


def can_preempt() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Raise JobTimeoutError in the block once ``seconds`` have passed (main thread only)."""
    if not can_preempt():
        yield
        return

    def _expire(signum: int, frame: FrameType | None) -> None:
        raise JobTimeoutError(f"job ran past its {seconds:.3g}s budget")

    previous = signal.signal(signal.SIGALRM, _expire)
    signal.setitimer(signal.ITIMER_REAL, max(seconds, 0.001))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
