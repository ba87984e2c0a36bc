"""Keep a running job's message hidden from other workers, and let it go soon after its worker dies.

SQS hides a received message for the queue's visibility timeout, counted from the receive. That
timeout is six function timeouts (as AWS advises, for Lambda's retries of a throttled batch
before it runs), yet a job can still start with little of it left: after a long batching window,
throttled invocations, or the earlier records of its batch. So while a job runs, a thread renews
its message's visibility every third of a *lease* of one function timeout, the longest an
invocation holds a message once its batch runs. Only the running record is renewed.

One thread per worker renews every running job's message, started with the first job: a thread
per job cost each job more CPU than the renewal it almost never needs.

No renewal reaches past the invocation's deadline plus ``DEADLINE_MARGIN``: after the deadline
the invocation is over (and the job's idempotency lock has expired), so if the worker died or
hung, its message comes back then rather than a whole visibility timeout later. The margin lets
the event source mapping delete a finished job's message before it could reappear. A job
shorter than one interval makes no call at all. A renewal that fails is logged and the job runs
on: at worst the message is redelivered, and idempotency absorbs the second run.
"""

import math
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from aws_lambda_powertools import Logger

from conveyor.contract.declarations import Queue
from conveyor.contract.settings import SERVICE_NAME

logger = Logger(service=SERVICE_NAME, child=True)

# Renewals per lease: two may fail or run late before the lease lapses.
BEATS_PER_LEASE = 3
# How far past the invocation's deadline a renewal may hold the message: time for the event
# source mapping to delete the message of a job that finished just before the deadline.
DEADLINE_MARGIN = timedelta(seconds=5)


def lease_for(queue: Queue) -> timedelta:
    """One function timeout: once its batch runs, an invocation holds a message no longer than that."""
    return queue.function_timeout


def visibility_for(now: float, *, lease: timedelta, hold_until: float) -> int | None:
    """Whole seconds of visibility a renewal at ``now`` sets, or None once ``hold_until`` has passed."""
    left = hold_until - now
    if left <= 0:
        return None
    return math.ceil(min(lease.total_seconds(), left))


@dataclass(eq=False)
class _Beat:
    """One running job's message: when its next renewal is due, and whether one is being sent."""

    receipt_handle: str
    job_id: str
    hold_until: float
    due: float
    renewing: bool = False


class Heartbeats:
    """Renews, from one daemon thread, the visibility of each message whose job runs in ``keep``.

    ``hold_until`` is a ``time.monotonic()`` instant. Leaving ``keep`` waits out a renewal of that
    message already being sent, so none lands after it: the harness may then set the retry
    backoff without a race. Entering and leaving take a lock and wake no thread, so a job that ends
    before its first renewal costs next to nothing.
    """

    def __init__(self, sqs_client: Any, *, queue_url: str, lease: timedelta) -> None:
        self._sqs = sqs_client
        self._queue_url = queue_url
        self._lease = lease
        self._interval = lease.total_seconds() / BEATS_PER_LEASE
        # Guards the fields below; notified when renewals end, for a job leaving ``keep``.
        self._changed = threading.Condition()
        self._beats: set[_Beat] = set()
        self._thread: threading.Thread | None = None

    @contextmanager
    def keep(self, *, receipt_handle: str, job_id: str, hold_until: float) -> Iterator[None]:
        """Keep the message hidden while the block runs, never past ``hold_until``."""
        beat = _Beat(receipt_handle, job_id, hold_until, due=time.monotonic() + self._interval)
        with self._changed:  # no notify: the thread wakes at least once an interval, before this beat is due
            self._beats.add(beat)
            if self._thread is None:
                self._thread = threading.Thread(target=self._beat_forever, name="conveyor-heartbeats", daemon=True)
                self._thread.start()
        try:
            yield
        finally:
            with self._changed:
                self._beats.discard(beat)
                self._changed.wait_for(lambda: not beat.renewing)

    def _beat_forever(self) -> None:
        while True:
            with self._changed:
                due = self._wait_for_due()
                for beat in due:
                    beat.renewing = True
            for beat in due:
                self._renew(beat)
            with self._changed:
                for beat in due:
                    beat.renewing = False
                    beat.due += self._interval
                self._changed.notify_all()

    def _wait_for_due(self) -> list[_Beat]:
        """The beats whose renewal is due, once there are any (the caller holds ``_changed``)."""
        while True:
            now = time.monotonic()
            due = [beat for beat in self._beats if beat.due <= now]
            if due:
                return due
            # Never longer than an interval: a beat added meanwhile is due an interval after it was added.
            upcoming = [beat.due for beat in self._beats if beat.due < math.inf]
            self._changed.wait(min([*upcoming, now + self._interval]) - now)

    def _renew(self, beat: _Beat) -> None:
        seconds = visibility_for(time.monotonic(), lease=self._lease, hold_until=beat.hold_until)
        if seconds is None:
            beat.due = math.inf  # past the hold: the message may go
            return
        try:
            self._sqs.change_message_visibility(
                QueueUrl=self._queue_url, ReceiptHandle=beat.receipt_handle, VisibilityTimeout=seconds
            )
        except Exception:  # one thread renews every running job's message: no failure may end it
            logger.warning("could not extend a running job's visibility", exc_info=True, extra={"job_id": beat.job_id})
