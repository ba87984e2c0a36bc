"""Keep a running job's message hidden from other workers, and let it go soon after its worker dies.

SQS hides a received message for the queue's visibility timeout, counted from the receive. That
timeout is six function timeouts (as AWS advises, for Lambda's retries of a throttled batch
before it runs), yet a job can still start with little of it left: after a long batching window,
throttled invocations, or the earlier records of its batch. So while a job runs, a thread renews
its message's visibility every third of a *lease* of one function timeout, the longest an
invocation holds a message once its batch runs. Only the running record is renewed.

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
from datetime import timedelta
from types import TracebackType
from typing import Any

from aws_lambda_powertools import Logger
from botocore.exceptions import BotoCoreError, ClientError

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


class Heartbeat:
    """Renews one message's visibility from a daemon thread while the ``with`` block runs.

    ``hold_until`` is a ``time.monotonic()`` instant. Leaving the block stops and joins the thread,
    so no renewal lands after it: the harness may then set the retry backoff without a race.
    """

    def __init__(
        self,
        sqs_client: Any,
        *,
        queue_url: str,
        receipt_handle: str,
        job_id: str,
        lease: timedelta,
        hold_until: float,
    ) -> None:
        self._sqs = sqs_client
        self._job_id = job_id
        self._queue_url = queue_url
        self._receipt_handle = receipt_handle
        self._lease = lease
        self._hold_until = hold_until
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._beat_until_stopped, name="conveyor-heartbeat", daemon=True)

    def __enter__(self) -> "Heartbeat":
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self._stopped.set()
        self._thread.join()

    def _beat_until_stopped(self) -> None:
        interval = self._lease.total_seconds() / BEATS_PER_LEASE
        while not self._stopped.wait(interval):
            seconds = visibility_for(time.monotonic(), lease=self._lease, hold_until=self._hold_until)
            if seconds is None:
                return
            try:
                self._sqs.change_message_visibility(
                    QueueUrl=self._queue_url, ReceiptHandle=self._receipt_handle, VisibilityTimeout=seconds
                )
            except (BotoCoreError, ClientError):
                logger.warning(
                    "could not extend a running job's visibility", exc_info=True, extra={"job_id": self._job_id}
                )
