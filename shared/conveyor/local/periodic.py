"""A call repeated every period in a daemon thread: the local stand-in for a timer AWS runs (a rule, a poller)."""

import threading
import time
from collections.abc import Callable


class Periodic:
    """Calls ``run`` every ``period_s`` until ``stop``; ``run`` handles its own errors (a failure waits its turn)."""

    def __init__(self, run: Callable[[], None], *, period_s: float, name: str) -> None:
        self._run = run
        self._period_s = period_s
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()

    def join(self, deadline: float | None = None) -> bool:
        """After ``stop``, wait until ``deadline`` (monotonic; None: however long) for a call in progress;
        True if none is left."""
        if self._thread.is_alive():
            self._thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return not self._thread.is_alive()

    def _loop(self) -> None:
        while not self._stopping.wait(self._period_s):
            self._run()
