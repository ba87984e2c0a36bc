"""Circuit breakers whose state every worker shares: one item per destination in the limits table.

The item ``breaker#<destination>`` (conveyor.worker.destinations.state) holds the state, the failures
(and calls) counted in the current window and the half-open probes handed out, so one worker's
failures open the breaker for all. Every change of state is a conditional UpdateItem: however many
workers see the K-th failure, or the end of the cool-down, at once, exactly one makes the transition
and reports it to ``on_transition``. The same write keeps it, with the HISTORY_SIZE before it, on the
item (the audit of automatic transitions that `conveyor limits` shows); each transition requires the
item's transition count unchanged, so the history it rewrites is never a stale copy.

What a call costs, in DynamoDB requests per worker:

- ``admit``: none while this worker's copy of the item is under STATE_REFRESH_S old, else one
  consistent GetItem; past the cool-down, one conditional UpdateItem to take a probe permit.
- ``record``: nothing for a success; one UpdateItem per failure (per call with ``error_rate``, the
  price of a rate: every call must be counted), one more when it opens the breaker; one for a
  probe's outcome.

The price of that cache: a worker may go on admitting calls for up to STATE_REFRESH_S after another
opened the breaker. Their outcomes are not counted, as only a closed breaker counts. Outcomes are
counted in fixed windows of ``breaker.window``, each from the first outcome counted after the last ended.

The breaker's own outage must not stop all work: an error from DynamoDB other than a failed
condition admits the call (it fails open) and drops the outcome, with a warning.
"""

import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from aws_lambda_powertools import Logger
from botocore.exceptions import BotoCoreError, ClientError

from conveyor.contract.destinations import Breaker
from conveyor.contract.durations import format_duration
from conveyor.contract.settings import SERVICE_NAME
from conveyor.worker.destinations.state import (
    CALLS,
    CHANGED_AT,
    CHANGED_BY,
    FAILURES,
    FORCED,
    HISTORY,
    KEY,
    OPEN_UNTIL,
    OPENED_AT,
    PROBES,
    REASON,
    STATE,
    TRANSITIONS,
    WINDOW_START,
    breaker_key,
)

logger = Logger(service=SERVICE_NAME)

# How stale a worker's copy of a breaker may be when it admits a call: one read per destination per
# worker this often, instead of one per call.
STATE_REFRESH_S = 1.0
# Transitions kept on the item, oldest dropped first.
HISTORY_SIZE = 20
# An operator's reason, at most: with the author's identity (an ARN, up to 2,048 characters) it keeps
# HISTORY_SIZE entries far under DynamoDB's item size (conveyor.contract.limits.DYNAMODB_MAX_ITEM_BYTES).
MAX_REASON_CHARS = 500
# Who makes the automatic transitions; an operator's carry their identity.
WORKER = "worker"
# How soon a call refused while the probes are out may come back: about one call's time (the guard
# jitters it and waits at least a second).
PROBE_WAIT_S = 2.0
# Conditional writes one operation tries before it gives up: each failed condition means another
# worker changed the item, and the next try plans from the item as that failure returned it.
MAX_ATTEMPTS = 3
FORCED_OPEN = "open"

_PLACEHOLDER = re.compile(r"#\w+")


class BreakerState(StrEnum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


@dataclass(frozen=True)
class Admission:
    """Whether a call may go ahead, whether it is a half-open probe, and else when to try again (seconds)."""

    allowed: bool
    probe: bool
    retry_after: float


@dataclass(frozen=True)
class Transition:
    """A change of a breaker's state: ``by`` is WORKER for an automatic one, the operator's identity when forced."""

    destination: str
    old: BreakerState
    new: BreakerState
    reason: str
    at: float
    by: str


@dataclass(frozen=True)
class BreakerStatus:
    """A breaker as stored: ``failures`` counted in the window that began at ``window_start``.

    ``open_until`` is None while closed or forced open until closed; while half-open it is the
    deadline of the probes handed out. ``reason``, ``by`` and ``at`` are the last transition's, and
    ``history`` the latest transitions, oldest first.
    """

    state: BreakerState
    open_until: float | None
    failures: int
    window_start: float | None
    probes: int
    forced: bool
    reason: str | None
    by: str | None
    at: float | None
    history: tuple[Transition, ...]


ALLOWED = Admission(allowed=True, probe=False, retry_after=0.0)
PROBE = Admission(allowed=True, probe=True, retry_after=0.0)

Item = Mapping[str, Any]


@dataclass(frozen=True)
class _Write:
    """One conditional UpdateItem on a breaker item, and the transition it makes, if any."""

    update: str
    condition: str
    values: dict[str, Any]
    transition: Transition | None = None


def _ignore(transition: Transition) -> None:
    """The default ``on_transition``: a caller that emits nothing, such as the CLI."""


class Breakers:
    """The breakers of every destination, through one worker's client and cache."""

    def __init__(
        self,
        dynamodb_client: Any,
        table: str,
        *,
        clock: Callable[[], float] = time.time,
        on_transition: Callable[[Transition], None] = _ignore,
    ) -> None:
        self._dynamodb = dynamodb_client
        self._table = table
        self._clock = clock
        self._on_transition = on_transition
        # destination -> (when read or written, the item as it stood then)
        self._items: dict[str, tuple[float, Item]] = {}

    def admit(self, destination: str, breaker: Breaker) -> Admission:
        """Whether a call to ``destination`` may go ahead now; past the cool-down, as a probe if one is left."""
        now = self._clock()
        try:
            item = self._fresh(destination, now)
            for _ in range(MAX_ATTEMPTS):
                decision = _admission(destination, breaker, item, now)
                if isinstance(decision, Admission):
                    return decision
                written, item = self._write(destination, decision, now)
                if written:
                    return PROBE
        except (ClientError, BotoCoreError):
            logger.warning("breaker state unavailable: admitting the call", destination=destination, exc_info=True)
            # Not asked again for STATE_REFRESH_S: each ask costs the client's retries.
            self._items[destination] = (now, {})
            return ALLOWED
        return Admission(allowed=False, probe=False, retry_after=PROBE_WAIT_S)

    def record(self, destination: str, breaker: Breaker, *, ok: bool, probe: bool) -> None:
        """Count a call's outcome; ``probe`` when ``admit`` made it one, whose outcome closes or reopens the breaker."""
        now = self._clock()
        try:
            if probe:
                self._attempt(
                    destination,
                    self._cached(destination),
                    lambda item: _settle(destination, breaker, item, ok, now),
                    now,
                )
                return
            if ok and breaker.error_rate is None:
                return
            counted = self._attempt(
                destination, self._cached(destination), lambda item: _count(breaker, item, ok, now), now
            )
            if counted is not None:
                self._attempt(destination, counted[1], lambda item: _trip(destination, breaker, item, now), now)
        except (ClientError, BotoCoreError):
            logger.warning("breaker state unavailable: outcome not counted", destination=destination, exc_info=True)

    def read(self, destination: str) -> BreakerStatus:
        """The breaker as stored now (one consistent read); a destination never called reads as closed."""
        return _status(destination, self._get(destination))

    def force(
        self, destination: str, state: BreakerState, *, reason: str, by: str, until: float | None = None
    ) -> Transition:
        """An operator's `conveyor breaker open|close`; ValueError for half-open or an overlong reason.

        Forced open, it stays open until ``until`` (then probes as after a cool-down), or without
        ``until`` until forced closed. Forced closed, its failures and probes start again from zero.
        """
        if state is BreakerState.HALF_OPEN:
            raise ValueError("a breaker can be forced open or closed, not half-open")
        if len(reason) > MAX_REASON_CHARS:
            raise ValueError(f"a breaker's reason is at most {MAX_REASON_CHARS} characters, got {len(reason)}")
        now = self._clock()
        written = self._attempt(
            destination,
            self._get(destination),
            lambda item: _forced(destination, item, state, reason, by, now, until),
            now,
        )
        if written is None or written[0].transition is None:
            raise RuntimeError(f"breaker {destination!r} kept changing while forced; force it again")
        return written[0].transition

    def _fresh(self, destination: str, now: float) -> Item:
        """This worker's copy of the item if under STATE_REFRESH_S old, else the item read now."""
        cached = self._items.get(destination)
        if cached is not None and now - cached[0] < STATE_REFRESH_S:
            return cached[1]
        item = self._get(destination)
        self._items[destination] = (now, item)
        return item

    def _cached(self, destination: str) -> Item:
        """This worker's last copy of the item, however old: a plan's first guess, which its condition checks."""
        cached = self._items.get(destination)
        return {} if cached is None else cached[1]

    def _get(self, destination: str) -> Item:
        item: Item = self._dynamodb.get_item(
            TableName=self._table, Key={KEY: {"S": breaker_key(destination)}}, ConsistentRead=True
        ).get("Item", {})
        return item

    def _attempt(
        self, destination: str, item: Item, plan: Callable[[Item], _Write | None], now: float
    ) -> tuple[_Write, Item] | None:
        """Write what ``plan`` makes of the item, planning again from the item a failed condition returns.

        The write made and the item after it, or None when ``plan`` found nothing to do or the item kept changing.
        """
        for _ in range(MAX_ATTEMPTS):
            write = plan(item)
            if write is None:
                return None
            written, item = self._write(destination, write, now)
            if written:
                return write, item
        return None

    def _write(self, destination: str, write: _Write, now: float) -> tuple[bool, Item]:
        """Whether ``write``'s condition held, and the item after it (or as it stood, if not); cached either way."""
        names = {
            placeholder: placeholder[1:] for placeholder in _PLACEHOLDER.findall(f"{write.update} {write.condition}")
        }
        try:
            item: Item = self._dynamodb.update_item(
                TableName=self._table,
                Key={KEY: {"S": breaker_key(destination)}},
                UpdateExpression=write.update,
                ConditionExpression=write.condition,
                ExpressionAttributeNames=names,
                ExpressionAttributeValues=write.values,
                ReturnValues="ALL_NEW",
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )["Attributes"]
        except self._dynamodb.exceptions.ConditionalCheckFailedException as error:
            self._items[destination] = (now, error.response.get("Item", {}))
            return False, self._items[destination][1]
        self._items[destination] = (now, item)
        if write.transition is not None:
            self._on_transition(write.transition)
        return True, item


def _admission(destination: str, breaker: Breaker, item: Item, now: float) -> Admission | _Write:
    """What the item says of a call now: an answer, or the write that would make it a probe."""
    state = _state(item)
    open_until = _number(item, OPEN_UNTIL)
    if state is BreakerState.CLOSED:
        return ALLOWED
    deadline = now + breaker.cool_down.total_seconds()
    if state is BreakerState.OPEN:
        if open_until is None:  # forced open until forced closed
            return Admission(allowed=False, probe=False, retry_after=breaker.cool_down.total_seconds())
        if now < open_until:
            return Admission(allowed=False, probe=False, retry_after=open_until - now)
        reason = "forced open ended: probing" if FORCED in item else "cool-down over: probing"
        return _transition(
            destination,
            item,
            BreakerState.HALF_OPEN,
            reason=reason,
            by=WORKER,
            now=now,
            sets=f"#{PROBES} = :one, #{OPEN_UNTIL} = :deadline",
            removes=f"#{FORCED}",
            condition=f"#{STATE} = :open AND #{OPEN_UNTIL} <= :now",
            values={":one": _n(1), ":deadline": _n(deadline), ":open": _s(BreakerState.OPEN)},
        )
    probe_deadline = open_until or 0.0
    if now >= probe_deadline:  # the probes handed out never reported: hand out new ones
        return _Write(
            update=f"SET #{PROBES} = :one, #{OPEN_UNTIL} = :deadline",
            condition=f"#{STATE} = :half_open AND #{OPEN_UNTIL} <= :now",
            values={":one": _n(1), ":deadline": _n(deadline), ":half_open": _s(state), ":now": _n(now)},
        )
    if _count_of(item, PROBES) < breaker.probes:
        return _Write(
            update=f"ADD #{PROBES} :one",
            condition=f"#{STATE} = :half_open AND #{PROBES} < :probes AND #{OPEN_UNTIL} > :now",
            values={":one": _n(1), ":half_open": _s(state), ":probes": _n(breaker.probes), ":now": _n(now)},
        )
    return Admission(allowed=False, probe=False, retry_after=min(PROBE_WAIT_S, probe_deadline - now))


def _count(breaker: Breaker, item: Item, ok: bool, now: float) -> _Write | None:
    """The write counting one outcome in a closed breaker's window, starting a new window if it ended."""
    if _state(item) is not BreakerState.CLOSED:
        return None
    floor = now - breaker.window.total_seconds()
    counted = ([CALLS] if breaker.error_rate is not None else []) + ([] if ok else [FAILURES])
    window_start = _number(item, WINDOW_START)
    if window_start is not None and window_start > floor:
        return _Write(
            update="ADD " + ", ".join(f"#{name} :one" for name in counted),
            condition=f"#{STATE} = :closed AND #{WINDOW_START} > :floor",
            values={":one": _n(1), ":closed": _s(BreakerState.CLOSED), ":floor": _n(floor)},
        )
    fresh = {FAILURES: 0 if ok else 1} | ({CALLS: 1} if breaker.error_rate is not None else {})
    return _Write(
        update=f"SET #{STATE} = :closed, #{WINDOW_START} = :now, " + ", ".join(f"#{name} = :{name}" for name in fresh),
        condition=f"(attribute_not_exists(#{STATE}) OR #{STATE} = :closed) "
        f"AND (attribute_not_exists(#{WINDOW_START}) OR #{WINDOW_START} <= :floor)",
        values={":closed": _s(BreakerState.CLOSED), ":now": _n(now), ":floor": _n(floor)}
        | {f":{name}": _n(value) for name, value in fresh.items()},
    )


def _trip(destination: str, breaker: Breaker, item: Item, now: float) -> _Write | None:
    """CLOSED -> OPEN, if the failures counted in the current window reach the breaker's threshold."""
    window_start = _number(item, WINDOW_START)
    if _state(item) is not BreakerState.CLOSED or window_start is None:
        return None
    if window_start <= now - breaker.window.total_seconds():
        return None
    failures, calls = _count_of(item, FAILURES), _count_of(item, CALLS)
    window = format_duration(breaker.window)
    if breaker.error_rate is None:
        if failures < breaker.failures:
            return None
        reason = f"{failures} failures within {window}"
    else:
        if calls < breaker.min_calls or failures / calls < breaker.error_rate:
            return None
        reason = f"{failures} of {calls} calls failed within {window} (error rate at least {breaker.error_rate:g})"
    return _transition(
        destination,
        item,
        BreakerState.OPEN,
        reason=reason,
        by=WORKER,
        now=now,
        sets=f"#{OPEN_UNTIL} = :open_until, #{OPENED_AT} = :now, #{PROBES} = :zero",
        condition=f"#{STATE} = :closed AND #{WINDOW_START} = :window_start",
        values={
            ":open_until": _n(now + breaker.cool_down.total_seconds()),
            ":zero": _n(0),
            ":closed": _s(BreakerState.CLOSED),
            ":window_start": item[WINDOW_START],
        },
    )


def _settle(destination: str, breaker: Breaker, item: Item, ok: bool, now: float) -> _Write | None:
    """A probe's outcome: HALF_OPEN -> CLOSED on a success, back to OPEN for another cool-down on a failure."""
    if _state(item) is not BreakerState.HALF_OPEN:
        return None  # another probe settled it first, or an operator forced it
    condition = f"#{STATE} = :half_open"
    half_open = {":half_open": _s(BreakerState.HALF_OPEN)}
    if ok:
        return _closing(
            destination, item, reason="probe succeeded", by=WORKER, now=now, condition=condition, values=half_open
        )
    return _transition(
        destination,
        item,
        BreakerState.OPEN,
        reason="probe failed",
        by=WORKER,
        now=now,
        sets=f"#{OPEN_UNTIL} = :open_until, #{PROBES} = :zero",
        condition=condition,
        values=half_open | {":open_until": _n(now + breaker.cool_down.total_seconds()), ":zero": _n(0)},
    )


def _forced(
    destination: str, item: Item, state: BreakerState, reason: str, by: str, now: float, until: float | None
) -> _Write:
    """An operator's transition, whatever the state: it requires only that no other transition came first."""
    if state is BreakerState.CLOSED:
        return _closing(destination, item, reason=reason, by=by, now=now, condition="", values={})
    return _transition(
        destination,
        item,
        BreakerState.OPEN,
        reason=reason,
        by=by,
        now=now,
        sets=f"#{FORCED} = :forced, #{PROBES} = :zero, #{OPENED_AT} = if_not_exists(#{OPENED_AT}, :now)"
        + ("" if until is None else f", #{OPEN_UNTIL} = :until"),
        removes=f"#{OPEN_UNTIL}" if until is None else None,
        condition="",
        values={":forced": _s(FORCED_OPEN), ":zero": _n(0)} | ({} if until is None else {":until": _n(until)}),
    )


def _closing(
    destination: str, item: Item, *, reason: str, by: str, now: float, condition: str, values: dict[str, Any]
) -> _Write:
    """-> CLOSED, with a new window and no failures, calls or probes."""
    return _transition(
        destination,
        item,
        BreakerState.CLOSED,
        reason=reason,
        by=by,
        now=now,
        sets=f"#{FAILURES} = :zero, #{CALLS} = :zero, #{PROBES} = :zero, #{WINDOW_START} = :now",
        removes=f"#{OPEN_UNTIL}, #{OPENED_AT}, #{FORCED}",
        condition=condition,
        values=values | {":zero": _n(0)},
    )


def _transition(
    destination: str,
    item: Item,
    new: BreakerState,
    *,
    reason: str,
    by: str,
    now: float,
    sets: str,
    condition: str,
    values: dict[str, Any],
    removes: str | None = None,
) -> _Write:
    """A write to state ``new`` that also records the transition, on condition that no other came since ``item``."""
    transition = Transition(destination=destination, old=_state(item), new=new, reason=reason, at=now, by=by)
    count = _count_of(item, TRANSITIONS)
    history = [*item.get(HISTORY, {}).get("L", []), _entry(transition)][-HISTORY_SIZE:]
    pin = f"attribute_not_exists(#{TRANSITIONS})" if count == 0 else f"#{TRANSITIONS} = :transitions"
    update = (
        f"SET #{STATE} = :state, #{REASON} = :reason, #{CHANGED_BY} = :by, #{CHANGED_AT} = :now, "
        f"#{HISTORY} = :history, #{TRANSITIONS} = :next, {sets}"
    )
    return _Write(
        update=update + (f" REMOVE {removes}" if removes else ""),
        condition=f"({condition}) AND {pin}" if condition else pin,
        values=values
        | {
            ":state": _s(new),
            ":reason": _s(reason),
            ":by": _s(by),
            ":now": _n(now),
            ":history": {"L": history},
            ":next": _n(count + 1),
        }
        | ({":transitions": _n(count)} if count else {}),
        transition=transition,
    )


def _status(destination: str, item: Item) -> BreakerStatus:
    return BreakerStatus(
        state=_state(item),
        open_until=_number(item, OPEN_UNTIL),
        failures=_count_of(item, FAILURES),
        window_start=_number(item, WINDOW_START),
        probes=_count_of(item, PROBES),
        forced=FORCED in item,
        reason=item[REASON]["S"] if REASON in item else None,
        by=item[CHANGED_BY]["S"] if CHANGED_BY in item else None,
        at=_number(item, CHANGED_AT),
        history=_transitions(destination, item),
    )


def _entry(transition: Transition) -> dict[str, Any]:
    return {
        "M": {
            "from": _s(transition.old),
            "to": _s(transition.new),
            "reason": _s(transition.reason),
            "by": _s(transition.by),
            "at": _n(transition.at),
        }
    }


def _transitions(destination: str, item: Item) -> tuple[Transition, ...]:
    return tuple(
        Transition(
            destination=destination,
            old=BreakerState(entry["M"]["from"]["S"]),
            new=BreakerState(entry["M"]["to"]["S"]),
            reason=entry["M"]["reason"]["S"],
            at=float(entry["M"]["at"]["N"]),
            by=entry["M"]["by"]["S"],
        )
        for entry in item.get(HISTORY, {}).get("L", [])
    )


def _state(item: Item) -> BreakerState:
    return BreakerState(item[STATE]["S"]) if STATE in item else BreakerState.CLOSED


def _number(item: Item, name: str) -> float | None:
    return float(item[name]["N"]) if name in item else None


def _count_of(item: Item, name: str) -> int:
    return int(item[name]["N"]) if name in item else 0


def _n(value: float) -> dict[str, str]:
    return {"N": repr(value)}


def _s(value: str) -> dict[str, str]:
    return {"S": str(value)}
