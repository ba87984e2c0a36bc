"""Rate limits every worker shares: a token bucket per destination, or per key value, in DynamoDB.

The bucket is the generic cell rate algorithm (GCRA) on one item (``state.rate_key``): ``tat``, the
theoretical arrival time, is when the bucket would be full again. With ``T = per / rate`` and the
tolerance ``tau = (burst - 1) * T``, a token may be taken at ``now`` while ``max(tat, now) <= now +
tau``, and taking it sets ``tat = max(tat, now) + T``. For any window [a, a + W]: each token taken in it
moves ``tat`` on by ``T`` from at least ``a``, and the last one was allowed at a time <= a + W, so
``a + (n - 1) * T <= a + W + tau``, that is ``n <= W / T + burst`` = ``rate * W / per + burst``. The
argument never uses the order of the writes, so workers whose requests arrive out of order keep it.

A token is taken with one conditional ``UpdateItem`` and no read, in one of two forms: a busy bucket
(``tat`` ahead of now) adds ``T`` to ``tat``, an idle one (no ``tat``, or one already past) sets it to
``now + T``. A failed condition returns the item (ALL_OLD), which tells whether to try the other
form or how long to wait. Each bucket remembers the ``tat`` its last answer showed, so the first form
tried is usually the right one, and a bucket known to be empty answers without any request.

Token leases. A worker calling often takes ``k`` tokens in one write (``tat`` moves on ``k * T``) and
hands them out itself. Using a token later than the time its write was accounted at breaks the bound
above by ``rate * delay``. So on a bucket that may lease (``_Shape.validity`` > 0) every token, leased or
single, is valid only for ``validity`` after the ``now`` its write was accounted at, and every write
to that bucket uses the tolerance ``tau - validity``: in a window [a, a + W] of *use* times the tokens
were accounted in [a - validity, a + W], and the last write's condition gives ``a - validity + (n - 1) * T
<= a + W + tau - validity``: the same ``n <= W / T + burst``. Whether a bucket leases is decided by its
declaration alone, so every worker applies the same tolerance (one worker leasing with a smaller
tolerance beside others taking single tokens with the full one would break the bound by
``rate * validity``). The first token of every write is used when the write answers, on every bucket,
as with any rate limiter: the guarantee is about the times tokens were taken, and a call starts that
much later (the write's round trip); a lease answered after its validity keeps only that first token.
(Dropping it too would starve a bucket whenever DynamoDB answers slower than the validity.) A bucket
too slow or too small to lease (``MAX_RESERVED_SHARE``) keeps its whole tolerance.

Times are epoch seconds as DynamoDB numbers, written exactly from whole microseconds (never a float's
repr): the caller's clock to the microsecond, not the millisecond, since a token counted at a time
earlier than the caller's own breaks the bound by that much; ``T`` rounded up, so the rate taken never
exceeds the declared one. Workers' clocks must agree well within ``T`` (see .state).
"""

import base64
import hashlib
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from decimal import ROUND_CEILING, Decimal
from typing import Any

from conveyor.contract.destinations import RateLimit
from conveyor.worker.destinations.state import EXPIRES_AT, KEY, TAT, rate_key

MICROS = 1_000_000
_MICROSECOND = timedelta(microseconds=1)
# How long a token may be used after the time its write was accounted at, on a bucket that leases:
# a DynamoDB round trip from Lambda (a few milliseconds, tens at worst) and the calls of a hot worker
# fit in it, and the tolerance it costs (at most rate * LEASE_VALIDITY_S tokens of the burst) stays small.
LEASE_VALIDITY_S = 0.05
# A bucket leases only if a token refills within a lease's validity (a worker can then use several in
# it), and gives up at most this share of its tolerance for it: the reservation costs whole tokens of
# the burst a caller can take at once (at least one, rate * validity / per in all).
MAX_RESERVED_SHARE = 0.25
# At most this many tokens in one write: a worker that stops calling wastes at most this many - 1.
MAX_LEASE_TOKENS = 10
# A per-key bucket's item expires (DynamoDB TTL) this long after its tat: only a bucket whose tat has
# passed, which is the same as no item, may disappear, with room for workers' clock skew.
KEYED_BUCKET_TTL_MARGIN_S = 60
# Key values (and holder ids, conveyor.worker.destinations.slots) up to this many UTF-8 bytes name
# their item as they are; longer ones by a hash, so a key stays small and valid whatever a payload holds.
MAX_PLAIN_NAME_BYTES = 64
# Buckets whose last answer a worker remembers: per-key buckets are as many as the keys, so the
# least recently used are forgotten (which costs at most one extra write when they come back).
MAX_REMEMBERED_BUCKETS = 1024
# Writes per acquisition: busy, then idle, then busy again is the longest way when every other
# worker's write lands in between (tat only grows, so a fourth would find the bucket empty).
MAX_WRITES = 3

_TAT = "#tat"
_EXPIRES_AT = "#expires_at"
_BUSY = f"{_TAT} > :now AND {_TAT} <= :latest"
_IDLE = f"attribute_not_exists({_TAT}) OR {_TAT} <= :now"
_ADD = f"SET {_TAT} = {_TAT} + :add"
_SET = f"SET {_TAT} = :tat"
_HASHED = "#"  # a hashed name starts with it; a plain one never does
_HASH_BYTES = 16


def bounded_name(value: str, max_bytes: int = MAX_PLAIN_NAME_BYTES) -> str:
    """``value`` if it is short, valid UTF-8 and not empty; else ``#`` and its hash (128 bits, base64url).

    A plain value never starts with ``#``, so no value can pose as another's hash.
    """
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:  # a lone surrogate: no request could carry it
        size = max_bytes + 1
    if 0 < size <= max_bytes and not value.startswith(_HASHED):
        return value
    digest = hashlib.blake2b(value.encode("utf-8", "surrogatepass"), digest_size=_HASH_BYTES).digest()
    return _HASHED + base64.urlsafe_b64encode(digest).decode("ascii").rstrip("=")


def seconds_text(micros: int) -> str:
    """Epoch microseconds as a DynamoDB number, exactly (no float on the way)."""
    return f"{micros // MICROS}.{micros % MICROS:06d}"


def micros_of(text: str) -> int:
    """A DynamoDB number of seconds in whole microseconds, rounded up."""
    return int((Decimal(text) * MICROS).to_integral_value(rounding=ROUND_CEILING))


@dataclass(frozen=True)
class _Shape:
    """A limit in microseconds, as the writes use it."""

    interval: int  # T, rounded up
    burst: int
    tolerance: int  # how far past now tat may be for a token to be taken
    validity: int  # how long after its accounted time a token may be used; 0: the bucket does not lease
    max_lease: int


def _shape(limit: RateLimit) -> _Shape:
    interval = -(-(limit.per // _MICROSECOND) // limit.rate)
    declared = (limit.burst - 1) * interval
    validity = min(round(LEASE_VALIDITY_S * MICROS), int(declared * MAX_RESERVED_SHARE))
    if validity < interval:  # too slow or too small a bucket for a worker to use a lease
        return _Shape(interval, limit.burst, declared, 0, 1)
    tolerance = declared - validity
    return _Shape(interval, limit.burst, tolerance, validity, min(MAX_LEASE_TOKENS, tolerance // interval + 1))


@dataclass
class _Bucket:
    """What one worker knows of a bucket: its last answer, its own recent takes, and a lease's tokens."""

    tat: int | None = None
    busy: bool = False  # the form that last succeeded
    taken: deque[int] = field(default_factory=lambda: deque(maxlen=MAX_LEASE_TOKENS))
    leased: int = 0
    lease_until: int = 0
    lease_shape: _Shape | None = None

    def take_leased(self, shape: _Shape, now: int) -> bool:
        if self.leased and self.lease_shape == shape and now <= self.lease_until:
            self.leased -= 1
            self.taken.append(now)
            return True
        self.leased = 0
        return False

    def wanted(self, shape: _Shape, now: int) -> int:
        """Tokens to ask for: as many as this worker took in the last validity, within what a write may take."""
        recent = sum(1 for at in self.taken if at > now - shape.validity) if shape.validity else 0
        return max(1, min(shape.max_lease, recent))


class RateBuckets:
    """The rate buckets in the limits table ``table``; ``clock`` returns epoch seconds.

    Thread-safe: one instance serves every thread of a worker, and its leases are theirs to share.
    """

    def __init__(self, dynamodb_client: Any, table: str, *, clock: Callable[[], float] = time.time) -> None:
        self._dynamodb = dynamodb_client
        self._table = table
        self._clock = clock
        self._lock = threading.Lock()
        self._buckets: OrderedDict[str, _Bucket] = OrderedDict()

    def acquire(self, destination: str, limit: RateLimit, *, key_value: str | None = None) -> float:
        """Take one token: 0.0 when taken, else the seconds until one would be (nothing is taken then).

        ``key_value`` is the value of ``limit.key`` in the job's payload: each has its own bucket. A
        limit without ``key``, or a job without the value, uses the destination's one bucket.
        """
        key, keyed = self._key(destination, limit, key_value)
        shape = _shape(limit)
        now = self._micros()
        with self._lock:
            bucket = self._bucket(key)
            if bucket.take_leased(shape, now):
                return 0.0
            wanted, busy, known = bucket.wanted(shape, now), bucket.busy, bucket.tat
        granted, tat = self._take(key, shape, now, wanted, keyed=keyed, busy=busy, known=known)
        if tat is None:  # contended throughout: a token may be back within one interval
            return shape.interval / MICROS
        with self._lock:
            bucket.tat = max(tat, bucket.tat or tat)
            if not granted:
                return (tat - now - shape.tolerance) / MICROS
            bucket.busy = tat - granted * shape.interval > now
            bucket.taken.append(now)
            # The rest of a lease is good until its validity from the request: none of it, if the answer came later.
            bucket.leased, bucket.lease_until, bucket.lease_shape = granted - 1, now + shape.validity, shape
        return 0.0

    def peek(self, destination: str, limit: RateLimit, *, key_value: str | None = None) -> float:
        """Tokens in the bucket now, 0 to ``burst`` (a fraction is the next token refilling); one consistent read.

        Counted against the declared burst, of which acquire keeps ``rate * validity / per`` back on a
        bucket that leases (see ``MAX_RESERVED_SHARE``).
        """
        shape = _shape(limit)
        item = self._dynamodb.get_item(
            TableName=self._table,
            Key={KEY: {"S": self._key(destination, limit, key_value)[0]}},
            ConsistentRead=True,
        ).get("Item")
        now = self._micros()
        seen = _tat(item)
        tat = now if seen is None else max(now, seen)
        full = now + shape.burst * shape.interval
        return min(float(shape.burst), max(0.0, (full - tat) / shape.interval))

    def _take(
        self, key: str, shape: _Shape, now: int, wanted: int, *, keyed: bool, busy: bool, known: int | None
    ) -> tuple[int, int | None]:
        """(tokens granted, the tat after them); denied, (0, the tat seen); (0, None) if every write lost a race."""
        if known is not None and known > now:
            busy = True
            room = _room(shape, now, known)
            if room < 1:  # tat only grows: the bucket is still empty
                return 0, known
            wanted = min(wanted, room)
        for _ in range(MAX_WRITES):
            try:
                return wanted, self._write(key, shape, now, wanted, keyed=keyed, busy=busy)
            except self._dynamodb.exceptions.ConditionalCheckFailedException as error:
                tat = _tat(error.response.get("Item"))
            if tat is None or tat <= now:
                busy = False
                continue
            room = _room(shape, now, tat)
            if room < 1:
                return 0, tat
            busy, wanted = True, min(wanted, room)
        return 0, None

    def _write(self, key: str, shape: _Shape, now: int, tokens: int, *, keyed: bool, busy: bool) -> int:
        """Take ``tokens`` with one conditional write; the tat after it."""
        add = tokens * shape.interval
        names = {_TAT: TAT}
        if busy:
            update, condition = _ADD, _BUSY
            values = {
                ":add": {"N": seconds_text(add)},
                ":now": {"N": seconds_text(now)},
                ":latest": {"N": seconds_text(now + shape.tolerance - add + shape.interval)},
            }
        else:
            update, condition = _SET, _IDLE
            values = {":tat": {"N": seconds_text(now + add)}, ":now": {"N": seconds_text(now)}}
        if keyed:  # the tat after this write is at most now + tolerance + T, in both forms
            update += f", {_EXPIRES_AT} = :expires_at"
            names[_EXPIRES_AT] = EXPIRES_AT
            expires_at = -(-(now + shape.tolerance + shape.interval) // MICROS) + KEYED_BUCKET_TTL_MARGIN_S
            values[":expires_at"] = {"N": str(expires_at)}
        attributes = self._dynamodb.update_item(
            TableName=self._table,
            Key={KEY: {"S": key}},
            UpdateExpression=update,
            ConditionExpression=condition,
            ExpressionAttributeNames=names,
            ExpressionAttributeValues=values,
            ReturnValues="UPDATED_NEW",
            ReturnValuesOnConditionCheckFailure="ALL_OLD",
        )["Attributes"]
        return micros_of(attributes[TAT]["N"])

    def _key(self, destination: str, limit: RateLimit, key_value: str | None) -> tuple[str, bool]:
        """The bucket's item key, and whether it is a per-key bucket (which expires when idle)."""
        if limit.key is None or key_value is None:
            return rate_key(destination), False
        return rate_key(destination, bounded_name(key_value)), True

    def _bucket(self, key: str) -> _Bucket:
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = _Bucket()
            if len(self._buckets) > MAX_REMEMBERED_BUCKETS:
                self._buckets.popitem(last=False)
        else:
            self._buckets.move_to_end(key)
        return bucket

    def _micros(self) -> int:
        return round(self._clock() * MICROS)


def _room(shape: _Shape, now: int, tat: int) -> int:
    """Tokens one write may take at ``now`` from a bucket whose tat is ``tat`` (< 1: none)."""
    return (now + shape.tolerance - max(tat, now)) // shape.interval + 1


def _tat(item: Mapping[str, Any] | None) -> int | None:
    return micros_of(item[TAT]["N"]) if item and TAT in item else None
