"""Retry budgets: retries may not exceed a declared share of first attempts over a sliding window.

Retries multiply the load on a service that is already failing; a budget caps them at ``budget``
times the first attempts (Finagle's RetryBudget, the SRE book's "retry budget"), over every worker
of the queue or the destination alike. Each worker counts in memory and adds its counts to the
scope's fixed window bucket, ``budget#<scope>#<window start>`` in the limits table, once per batch
(``flush``): one UpdateItem per scope and bucket, whatever the batch's size.

The window slides: usage is the current bucket plus the previous one weighted by the share of it
the sliding window still covers, as a sliding-window rate limiter estimates. Both buckets come in
one BatchGetItem (so the worker's role needs ``dynamodb:BatchGetItem``), at most every
USAGE_REFRESH_S per scope and worker, plus this worker's unflushed counts. Other workers' counts
therefore reach a worker up to a batch and USAGE_REFRESH_S late: the budget is a bound on the
fleet's retry rate, not an exact count.

A budget that cannot be read allows the retry, with a warning: its own outage must not
dead-letter every failing job.
"""

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, NamedTuple

from aws_lambda_powertools import Logger
from botocore.exceptions import BotoCoreError, ClientError

from conveyor.contract.settings import SERVICE_NAME
from conveyor.worker.destinations.state import EXPIRES_AT, FIRST, KEY, RETRIES, budget_key

logger = Logger(service=SERVICE_NAME)

# Retries a scope may make in any window whatever its first attempts: without it, a queue with three
# jobs in a window and a budget of 0.1 could never retry at all. Finagle's RetryBudget has the same
# floor (``minRetriesPerSec``, 10 by default); here it is per window, over the whole fleet.
MIN_RETRIES_PER_WINDOW = 10.0
# How stale a worker's copy of a scope's stored counts may be: one read per scope per worker this often.
USAGE_REFRESH_S = 1.0
# A stored copy not refreshed for this long is of a bucket no window reaches any more (a window is at
# most an hour, and a bucket in use is read again every USAGE_REFRESH_S): forgotten, so a long-lived
# worker keeps only the buckets it uses.
FORGET_AFTER_S = 2 * 3600.0
# A bucket is counted into for one window and read as the previous one for the next; its item expires
# (DynamoDB TTL, which deletes lazily and is never relied on) a window after that.
EXPIRY_WINDOWS = 3


@dataclass(frozen=True)
class BudgetUsage:
    """First attempts and retries in the sliding window, the previous bucket's weighted by their overlap."""

    first: float
    retries: float


class _Bucket(NamedTuple):
    """One scope's fixed window of ``window`` seconds starting at ``start`` (a multiple of it, epoch seconds)."""

    scope: str
    window: int
    start: int

    @property
    def key(self) -> str:
        return budget_key(self.scope, self.start)


class _Counts(NamedTuple):
    first: float = 0.0
    retries: float = 0.0

    def plus(self, other: "_Counts", weight: float = 1.0) -> "_Counts":
        return _Counts(self.first + weight * other.first, self.retries + weight * other.retries)


class RetryBudgets:
    """Every retry budget, through one worker's client, buffer and cache; safe to share between threads."""

    def __init__(self, dynamodb_client: Any, table: str, *, clock: Callable[[], float] = time.time) -> None:
        self._dynamodb = dynamodb_client
        self._table = table
        self._clock = clock
        self._lock = threading.Lock()
        self._flushing = threading.Lock()
        # Counted here and not yet added to the table.
        self._pending: dict[_Bucket, _Counts] = {}
        # bucket key -> (when read or written, the counts stored then)
        self._stored: dict[str, tuple[float, _Counts]] = {}

    def count(self, scope: str, window: timedelta, *, retry: bool) -> None:
        """Count a first attempt, or a retry, in the scope's current bucket; written by the next ``flush``."""
        bucket = self._buckets(scope, window, self._clock())[0]
        with self._lock:
            self._pending[bucket] = self._pending.get(bucket, _Counts()).plus(_Counts(0, 1) if retry else _Counts(1, 0))

    def flush(self) -> None:
        """Add the counts to the table, one UpdateItem per bucket counted in; a failed one is kept for the next."""
        with self._flushing:
            with self._lock:
                batch = dict(self._pending)
            for bucket, counts in batch.items():
                try:
                    stored = self._dynamodb.update_item(
                        TableName=self._table,
                        Key={KEY: {"S": bucket.key}},
                        UpdateExpression="ADD #first :first, #retries :retries SET #expires_at = :expires_at",
                        ExpressionAttributeNames={"#first": FIRST, "#retries": RETRIES, "#expires_at": EXPIRES_AT},
                        ExpressionAttributeValues={
                            ":first": {"N": str(int(counts.first))},
                            ":retries": {"N": str(int(counts.retries))},
                            ":expires_at": {"N": str(bucket.start + EXPIRY_WINDOWS * bucket.window)},
                        },
                        # The whole item: UPDATED_NEW may leave out a count this flush added nothing to.
                        ReturnValues="ALL_NEW",
                    )["Attributes"]
                except (ClientError, BotoCoreError):
                    logger.warning("retry budget counts kept for the next flush", scope=bucket.scope, exc_info=True)
                    continue
                with self._lock:
                    left = self._pending[bucket].plus(counts, -1)
                    if left == _Counts():
                        del self._pending[bucket]
                    else:
                        self._pending[bucket] = left
                    # The write returns the bucket's new totals, every worker's: a read this worker need not make.
                    self._stored[bucket.key] = (self._clock(), _counts(stored))

    def usage(self, scope: str, window: timedelta) -> BudgetUsage:
        """First attempts and retries over the sliding window ending now, this worker's unflushed counts included."""
        now = self._clock()
        current, previous = self._buckets(scope, window, now)
        stored = self._read((current, previous), now)
        with self._lock:
            pending = {bucket: self._pending.get(bucket, _Counts()) for bucket in (current, previous)}
        overlap = 1 - (now - current.start) / current.window
        used = stored[current].plus(pending[current]).plus(stored[previous].plus(pending[previous]), overlap)
        return BudgetUsage(first=used.first, retries=used.retries)

    def allows_retry(self, scope: str, budget: float, window: timedelta) -> bool:
        """Whether one more retry keeps retries within ``budget`` times first attempts, plus MIN_RETRIES_PER_WINDOW."""
        try:
            used = self.usage(scope, window)
        except (ClientError, BotoCoreError):
            logger.warning("retry budget unreadable: allowing the retry", scope=scope, exc_info=True)
            return True
        return used.retries + 1 <= budget * used.first + MIN_RETRIES_PER_WINDOW

    @staticmethod
    def _buckets(scope: str, window: timedelta, now: float) -> tuple[_Bucket, _Bucket]:
        """The scope's current bucket and the one before it."""
        seconds = int(window.total_seconds())
        start = int(now // seconds) * seconds
        return _Bucket(scope, seconds, start), _Bucket(scope, seconds, start - seconds)

    def _read(self, buckets: Iterable[_Bucket], now: float) -> dict[_Bucket, _Counts]:
        """The stored counts of ``buckets``: from this worker's copy if under USAGE_REFRESH_S old, else read now.

        A key BatchGetItem leaves unprocessed (throttling) keeps its old copy, or counts nothing, until
        the next read: like an outage, it errs towards allowing retries.
        """
        with self._lock:
            copies = {bucket: self._stored.get(bucket.key) for bucket in buckets}
        stale = [bucket.key for bucket, copy in copies.items() if copy is None or now - copy[0] >= USAGE_REFRESH_S]
        if stale:
            response = self._dynamodb.batch_get_item(
                RequestItems={
                    self._table: {
                        "Keys": [{KEY: {"S": key}} for key in stale],
                        "ConsistentRead": True,
                        "ProjectionExpression": "#key, #first, #retries",
                        "ExpressionAttributeNames": {"#key": KEY, "#first": FIRST, "#retries": RETRIES},
                    }
                }
            )
            found = {item[KEY]["S"]: _counts(item) for item in response["Responses"].get(self._table, [])}
            unprocessed = response.get("UnprocessedKeys", {}).get(self._table, {}).get("Keys", [])
            read = set(stale) - {key[KEY]["S"] for key in unprocessed}
            with self._lock:
                for key in read:
                    self._stored[key] = (now, found.get(key, _Counts()))
                for key in [key for key, (at, _) in self._stored.items() if now - at > FORGET_AFTER_S]:
                    del self._stored[key]
                copies = {bucket: self._stored.get(bucket.key) for bucket in copies}
        return {bucket: _Counts() if copy is None else copy[1] for bucket, copy in copies.items()}


def _counts(item: dict[str, Any]) -> _Counts:
    return _Counts(
        float(item[FIRST]["N"]) if FIRST in item else 0.0,
        float(item[RETRIES]["N"]) if RETRIES in item else 0.0,
    )
