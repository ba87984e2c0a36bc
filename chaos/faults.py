"""Fault injection for the chaos run: botocore hooks that crash, throttle or garble chosen calls.

Faults enter as strict mode's checks do (conveyor.local.strict.client): handlers appended to
botocore's BUILTIN_HANDLERS, which every botocore session copies when it is made, so every
client made afterwards carries them and the code under test is never edited. (Clients made
before ``install`` keep the handlers their session had; pass them as ``clients`` to hook them.)

- A ``before-call`` handler sees the serialized request and may answer in the service's place
  with AWS's own error response, which botocore parses and raises as it would AWS's (the modeled
  exception class, ``Error.Code``, the HTTP status). An answer there skips botocore's retries, so
  an injected throttle or 500 is one that outlasted them.
- An ``after-call`` handler sees the parsed response, and what the ``before-call`` handler noted of
  the request in the call's ``context`` (``after-call`` is not given the request).

Every injected fault is first appended to the events file (one JSON line, written and fsynced),
then acted on, so even a crash leaves its record. Each eligible call draws from one seeded
Random under a lock: a run is reproducible as far as the threads' order of calls is.

The effect window: a provider that does not deduplicate applies an effect again when its job
runs again after the effect took place and before the job's idempotency record said COMPLETED.
The hooks follow each thread's open window (the effects its job applied, from the moment the
request is sent, until the record is saved COMPLETED, deleted, or the thread's next job begins)
in memory and in a journal beside the events file (``windows_journal``): one line per change,
written (not fsynced: a killed process's writes survive it, only the host's crash would lose
them). A window still open when its process ended was cut by that end, whatever it was: a
crash fault, a SIGKILL from outside, an exit past the drain's grace. A throttle ends its
thread's window too, and names its keys in ``detail["window_effect_keys"]``. ``window_faults_by_key``
counts both, so the chaos run's checker can tell a doubled effect that a fault explains from
one that nothing does.
"""

import json
import os
import random
import re
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, fields
from datetime import UTC, datetime
from math import isfinite
from pathlib import Path
from typing import Any, NoReturn

from aws_lambda_powertools.utilities.idempotency.persistence.datarecord import STATUS_CONSTANTS
from botocore.awsrequest import AWSResponse
from botocore.handlers import BUILTIN_HANDLERS
from botocore.model import OperationModel

from conveyor.contract import naming
from conveyor.contract.topology import Topology
from conveyor.local.provision import Provisioned
from conveyor.local.strict.client import Answer, answer
from functions.providers.effects import EFFECTS_TABLE, KEY_ATTRIBUTE

CRASH_BEFORE_EFFECT = "crash_before_effect"
CRASH_AFTER_EFFECT = "crash_after_effect"
CRASH_AFTER_SAVE = "crash_after_save"
CRASH_BEFORE_DELETE = "crash_before_delete"
THROTTLE_DYNAMODB = "throttle_dynamodb"
TRANSACTION_CONFLICT = "transaction_conflict"
SEND_BATCH_PARTIAL = "send_batch_partial"
DLQ_SEND_FAILURE = "dlq_send_failure"
RELAY_CRASH_BEFORE_SEND = "relay_crash_before_send"
RELAY_CRASH_AFTER_SEND = "relay_crash_after_send"

FAULTS: Mapping[str, str] = {
    CRASH_BEFORE_EFFECT: "the worker process exits just before an effect is applied (the ledger's `ADD applied`)",
    CRASH_AFTER_EFFECT: "the worker process exits just after an effect was applied, before its job's record is saved",
    CRASH_AFTER_SAVE: "the worker process exits just after a job's idempotency record was saved COMPLETED, "
    "before its message is deleted",
    CRASH_BEFORE_DELETE: "the worker process exits just before it deletes processed messages from a job queue",
    THROTTLE_DYNAMODB: "a DynamoDB call on the idempotency, outbox, leases or checkpoints table is throttled "
    "(ProvisionedThroughputExceededException or ThrottlingException, HTTP 400)",
    TRANSACTION_CONFLICT: "a TransactWriteItems is canceled: TransactionCanceledException, "
    "a TransactionConflict reason per item",
    SEND_BATCH_PARTIAL: "a SendMessageBatch sent every entry but reports some as failed (InternalError), "
    "so a sender's retry duplicates them",
    DLQ_SEND_FAILURE: "a SendMessage to a DLQ fails with InternalError (HTTP 500)",
    RELAY_CRASH_BEFORE_SEND: "the worker process exits just before a stream relay's SendMessageBatch",
    RELAY_CRASH_AFTER_SEND: "the worker process exits just after a stream relay's SendMessageBatch",
}

# How a crash ends the process: distinct from every exit Python or a signal gives, so the
# supervisor tells a fault's crash from a defect.
CRASH_EXIT_CODE = 86
# The local runtime's StreamPoller runs each relay invocation on its own thread, named
# "stream-poller-<function name>" (conveyor.local.stream_source); the relay's SendMessageBatch
# calls are the only SendMessageBatch calls such a thread makes (its give-ups are SendMessage).
RELAY_THREAD_PREFIX = "stream-poller-"
# The ledger's counter of effects that took place (functions.providers.effects.EffectsLedger.apply).
APPLIED_ATTRIBUTE = "applied"
# Powertools' status attribute (conveyor.worker.idempotency keeps its default) and the value a saved run has.
STATUS_ATTRIBUTE = "status"
COMPLETED = STATUS_CONSTANTS["COMPLETED"]
DLQ_SUFFIXES = ("-dlq", "-dlq.fifo")
DYNAMODB_DATA_OPERATIONS = frozenset(
    {
        "GetItem",
        "PutItem",
        "UpdateItem",
        "DeleteItem",
        "Query",
        "Scan",
        "BatchGetItem",
        "BatchWriteItem",
        "TransactGetItems",
        "TransactWriteItems",
    }
)
SQS_DELETES = frozenset({"DeleteMessage", "DeleteMessageBatch"})
THROTTLE_ERRORS = {
    "ProvisionedThroughputExceededException": "The level of configured provisioned throughput for the table was "
    "exceeded. Consider increasing your provisioning level with the UpdateTable API.",
    "ThrottlingException": "Rate of requests exceeds the allowed throughput.",
}
TRANSACTION_CONFLICT_CODE = "TransactionConflict"
TRANSACTION_CONFLICT_MESSAGE = "Transaction is ongoing for the item"
INTERNAL_ERROR = "InternalError"
INTERNAL_ERROR_MESSAGE = "We encountered an internal error. Please try again."
BAD_REQUEST = 400
INTERNAL_SERVER_ERROR = 500
SUCCESS_BELOW = 300
JSON_CONTENT = "application/x-amz-json-1.0"
ERROR_NAMESPACES = {"dynamodb": "com.amazonaws.dynamodb.v20120810", "sqs": "com.amazonaws.sqs"}
# Where a before-call handler leaves its notes for the after-call handler of the same call.
CONTEXT_KEY = "conveyor.chaos"
# The effect-window journal of an events file: ``<events>.windows``.
WINDOWS_SUFFIX = ".windows"
# An UpdateExpression's clause keywords (not a ":value" or "#name" that spells one).
_CLAUSE = re.compile(r"(?<![:#\w])(SET|REMOVE|ADD|DELETE)\b", re.IGNORECASE)
_ASSIGNMENT = re.compile(r"(#?[\w-]+)\s*=\s*(:[\w-]+)")

# Ends the process; tests pass one that raises instead.
Crash = Callable[[int], NoReturn]


def _rate(value: object, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not isfinite(value) or not 0 <= value <= 1:
        raise ValueError(f"{where}: rate {value!r} is not a number from 0 to 1")
    return float(value)


def _known(name: str, where: str) -> str:
    if name not in FAULTS:
        raise ValueError(f"{where}: unknown fault {name!r}; known faults: {', '.join(FAULTS)}")
    return name


@dataclass(frozen=True)
class FaultMix:
    """The probability of each fault per eligible call (0: never, 1: every one)."""

    crash_before_effect: float = 0.0
    crash_after_effect: float = 0.0
    crash_after_save: float = 0.0
    crash_before_delete: float = 0.0
    throttle_dynamodb: float = 0.0
    transaction_conflict: float = 0.0
    send_batch_partial: float = 0.0
    dlq_send_failure: float = 0.0
    relay_crash_before_send: float = 0.0
    relay_crash_after_send: float = 0.0

    def __post_init__(self) -> None:
        for name in FAULTS:
            _rate(getattr(self, name), f"fault {name}")

    @property
    def rates(self) -> dict[str, float]:
        """Every fault's rate, in FAULTS order."""
        return {name: float(getattr(self, name)) for name in FAULTS}

    def rate(self, fault: str) -> float:
        return float(getattr(self, _known(fault, "rate")))

    def only(self, names: Iterable[str]) -> "FaultMix":
        """These faults at their rates, every other at 0: what one process of the run meets."""
        kept = {_known(name, "only") for name in names}
        return FaultMix(**{name: rate for name, rate in self.rates.items() if name in kept})

    @classmethod
    def parse(cls, specs: Sequence[str], defaults: Mapping[str, float]) -> "FaultMix":
        """``defaults`` overridden by ``specs`` such as ``crash_after_effect=0.002`` (a later spec wins).

        A ValueError says in one line what is wrong: an unknown fault (with the known ones), a
        spec that is not NAME=RATE, or a rate outside [0, 1].
        """
        rates = {
            _known(name, "default rates"): _rate(rate, f"default rate of {name}") for name, rate in defaults.items()
        }
        for spec in specs:
            name, equals, text = spec.partition("=")
            name, text = name.strip(), text.strip()
            if not equals or not name or not text:
                raise ValueError(f"fault spec {spec!r}: expected NAME=RATE, e.g. {CRASH_AFTER_EFFECT}=0.002")
            _known(name, f"fault spec {spec!r}")
            try:
                value = float(text)
            except ValueError:
                raise ValueError(f"fault spec {spec!r}: rate {text!r} is not a number from 0 to 1") from None
            rates[name] = _rate(value, f"fault spec {spec!r}")
        return cls(**rates)

    def to_json(self) -> str:
        return json.dumps(self.rates)

    @classmethod
    def from_json(cls, text: str) -> "FaultMix":
        """The mix ``to_json`` wrote; faults it does not name are at 0. ValueError (one line) if it is not one."""
        try:
            rates = json.loads(text)
        except json.JSONDecodeError as error:
            raise ValueError(f"fault mix: not JSON ({error})") from None
        if not isinstance(rates, dict):
            raise ValueError(f"fault mix: expected a JSON object of fault -> rate, got {type(rates).__name__}")
        return cls(**{_known(name, "fault mix"): _rate(rate, f"fault mix {name}") for name, rate in rates.items()})


assert tuple(field.name for field in fields(FaultMix)) == tuple(FAULTS), "FaultMix must have a rate per fault"


@dataclass(frozen=True)
class ChaosTables:
    """The physical resources the faults aim at: Conveyor's own tables, the effects ledger, the job queues."""

    effects: str
    idempotency: str
    outbox: str
    leases: str
    checkpoints: str
    # Physical names of the job queues (their DLQs are not job queues).
    job_queues: frozenset[str]

    @classmethod
    def of(cls, provisioned: Provisioned, *, effects_table: str = EFFECTS_TABLE.name) -> "ChaosTables":
        """From what the local runtime provisioned."""
        return cls(
            effects=provisioned.tables[effects_table],
            idempotency=provisioned.idempotency_table,
            outbox=provisioned.outbox_table,
            leases=provisioned.leases_table,
            checkpoints=provisioned.checkpoints_table,
            job_queues=frozenset(_queue_name(queue.url) for queue in provisioned.queues.values()),
        )

    @classmethod
    def for_topology(
        cls, topology: Topology, *, prefix: str | None = None, effects_table: str = EFFECTS_TABLE.name
    ) -> "ChaosTables":
        """From the naming rules alone, before anything is provisioned (as conveyor.local.provision names them)."""
        return cls(
            effects=naming.table_name(effects_table, prefix=prefix),
            idempotency=naming.table_name(naming.IDEMPOTENCY_TABLE, prefix=prefix),
            outbox=naming.table_name(naming.OUTBOX_TABLE, prefix=prefix),
            leases=naming.table_name(naming.LEASES_TABLE, prefix=prefix),
            checkpoints=naming.table_name(naming.CHECKPOINTS_TABLE, prefix=prefix),
            job_queues=frozenset(naming.queue_name(q.name, fifo=q.fifo, prefix=prefix) for q in topology.queues),
        )

    @property
    def throttled(self) -> frozenset[str]:
        """The tables throttle_dynamodb hits: Conveyor's own, never the effects ledger."""
        return frozenset({self.idempotency, self.outbox, self.leases, self.checkpoints})


def _queue_name(url: str) -> str:
    return url.rstrip("/").rsplit("/", 1)[-1]


class _Events:
    """The events file: one JSON line per injected fault, on disk before the fault acts."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._lock = threading.Lock()

    def record(self, fault: str, detail: Mapping[str, Any]) -> None:
        line = {
            "fault": fault,
            "pid": os.getpid(),
            "at": datetime.now(UTC).isoformat(timespec="microseconds"),
            "detail": {**detail, "thread": threading.current_thread().name},
        }
        data = (json.dumps(line, sort_keys=True) + "\n").encode()
        with self._lock:
            # O_APPEND: lines of several processes (a supervisor and its children) never overwrite each other.
            fd = os.open(self._path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                written = 0
                while written < len(data):
                    written += os.write(fd, data[written:])
                os.fsync(fd)
            finally:
                os.close(fd)


def windows_journal(events: Path) -> Path:
    """Where the hooks journal effect windows, beside ``events``."""
    return events.with_name(events.name + WINDOWS_SUFFIX)


class _Windows:
    """Each thread's open effect window, in memory and in the journal (see the module docstring)."""

    def __init__(self, journal: Path) -> None:
        # O_APPEND: one write per line, never interleaved with another thread's or process's.
        self._fd: int | None = os.open(journal, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._open: dict[int, set[str]] = {}
        # Guards both; a write after ``release`` is dropped, never sent to a reused descriptor.
        self._lock = threading.Lock()

    def open(self, key: str) -> None:
        with self._lock:
            self._open.setdefault(threading.get_ident(), set()).add(key)
            self._journal("open", key)

    def drop(self, key: str) -> None:
        """The effect did not take place (the request failed): no window for it."""
        with self._lock:
            self._open.get(threading.get_ident(), set()).discard(key)
            self._journal("drop", key)

    def close(self) -> set[str]:
        """End this thread's window; the effect keys it held."""
        with self._lock:
            keys = self._open.pop(threading.get_ident(), set())
            if keys:
                self._journal("close")
        return keys

    def all(self) -> list[str]:
        """Every thread's open effect keys."""
        with self._lock:
            return sorted(set().union(*self._open.values()))

    def release(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def _journal(self, op: str, key: str | None = None) -> None:
        """One line, one write (the caller holds the lock)."""
        if self._fd is None:
            return
        line = {"pid": os.getpid(), "thread": threading.get_ident(), "op": op, **({"key": key} if key else {})}
        os.write(self._fd, (json.dumps(line) + "\n").encode())


class _Dice:
    """The seeded draws, one at a time: pollers call botocore from many threads."""

    def __init__(self, mix: FaultMix, rng: random.Random) -> None:
        self._mix = mix
        self._rng = rng
        self._lock = threading.Lock()

    def fires(self, fault: str) -> bool:
        rate = self._mix.rate(fault)
        if rate <= 0:  # no draw: a fault that is off leaves the others' sequence alone
            return False
        with self._lock:
            return self._rng.random() < rate

    def choice(self, options: Sequence[str]) -> str:
        with self._lock:
            return self._rng.choice(options)

    def subset(self, count: int) -> list[int]:
        """A random non-empty subset of range(count), in order."""
        with self._lock:
            return sorted(self._rng.sample(range(count), self._rng.randint(1, count)))


def _error(model: OperationModel, url: str, service: str, status: int, code: str, body: dict[str, Any]) -> Answer:
    """AWS's error response for a JSON-protocol service; SQS also names its query-protocol code in a header."""
    headers = {"Content-Type": JSON_CONTENT, "x-amzn-RequestId": str(uuid.uuid4())}
    if service == "sqs":
        fault = "Sender" if status < INTERNAL_SERVER_ERROR else "Receiver"
        headers["x-amzn-query-error"] = f"{code};{fault}"
    document = {"__type": f"{ERROR_NAMESPACES[service]}#{code}", **body}
    return answer(model, url, status, headers, json.dumps(document).encode())


def _request(params: Mapping[str, Any]) -> dict[str, Any]:
    """The request's parameters, from the serialized JSON body (both services here speak JSON)."""
    body = params.get("body") or b""
    text = body.decode() if isinstance(body, bytes | bytearray) else str(body)
    try:
        request = json.loads(text) if text.strip() else {}
    except ValueError:
        return {}
    return request if isinstance(request, dict) else {}


def _tables(operation: str, request: Mapping[str, Any]) -> set[str]:
    """Every table a DynamoDB data operation touches."""
    if operation in ("BatchGetItem", "BatchWriteItem"):
        return set(request.get("RequestItems") or {})
    if operation in ("TransactGetItems", "TransactWriteItems"):
        return {
            action["TableName"]
            for item in request.get("TransactItems") or []
            for action in item.values()
            if isinstance(action, dict) and "TableName" in action
        }
    return {request["TableName"]} if "TableName" in request else set()


def _clauses(expression: str) -> dict[str, list[str]]:
    """An UpdateExpression's clauses by keyword: ``ADD a :x SET b = :y`` -> {ADD: ["a :x"], SET: ["b = :y"]}."""
    parts = _CLAUSE.split(expression)
    clauses: dict[str, list[str]] = {}
    for keyword, body in zip(parts[1::2], parts[2::2], strict=True):
        clauses.setdefault(keyword.upper(), []).append(body.strip())
    return clauses


def _attribute(path: str, names: Mapping[str, str]) -> str:
    """The top-level attribute a document path names, through ExpressionAttributeNames."""
    top = re.split(r"[.\[]", path.strip(), maxsplit=1)[0]
    return names.get(top, top)


def _added(request: Mapping[str, Any]) -> set[str]:
    """The attributes an UpdateItem's ADD clauses add to."""
    names = request.get("ExpressionAttributeNames") or {}
    return {
        _attribute(action.split()[0], names)
        for body in _clauses(str(request.get("UpdateExpression", ""))).get("ADD", [])
        for action in body.split(",")
        if action.strip()
    }


def _sets_completed(request: Mapping[str, Any]) -> bool:
    """Whether an UpdateItem's SET clauses set the status attribute to COMPLETED (Powertools' save_success)."""
    names = request.get("ExpressionAttributeNames") or {}
    values = request.get("ExpressionAttributeValues") or {}
    return any(
        _attribute(path, names) == STATUS_ATTRIBUTE and values.get(value) == {"S": COMPLETED}
        for body in _clauses(str(request.get("UpdateExpression", ""))).get("SET", [])
        for path, value in _ASSIGNMENT.findall(body)
    )


def _succeeded(http_response: AWSResponse, parsed: Mapping[str, Any]) -> bool:
    return http_response.status_code < SUCCESS_BELOW and "Error" not in parsed


def _is_relay_thread() -> bool:
    return threading.current_thread().name.startswith(RELAY_THREAD_PREFIX)


@dataclass
class _Notes:
    """What a before-call handler noted of a request, for the after-call handler of the same call."""

    detail: dict[str, Any]
    effect_key: str | None = None  # an effect's ``ADD applied``
    save: bool = False  # Powertools' save of a COMPLETED record
    idempotency_write: str | None = None  # PutItem (a run begins) or DeleteItem (a failed run's record goes)
    batch_send: bool = False
    relay: bool = False
    # A client hooked twice (made after ``install`` and passed as ``clients`` too) acts once per call.
    after_seen: bool = False

    @classmethod
    def first_after(cls, context: Mapping[str, Any]) -> "_Notes | None":
        """The call's notes, the first time an after-call handler asks for them."""
        notes = context.get(CONTEXT_KEY)
        if not isinstance(notes, cls) or notes.after_seen:
            return None
        notes.after_seen = True
        return notes


class _Hooks:
    """The handlers of one installation; inert once it is uninstalled."""

    def __init__(self, mix: FaultMix, rng: random.Random, events: Path, tables: ChaosTables, crash: Crash) -> None:
        self.active = True
        self._dice = _Dice(mix, rng)
        self._events = _Events(events)
        self._tables = tables
        self._crash_with = crash
        # One crash per process: a second thread reaching a crash waits for the first's exit.
        self._crashing = threading.Lock()
        self.windows = _Windows(windows_journal(events))

    # -- DynamoDB --------------------------------------------------------------------------

    def before_dynamodb(
        self, model: OperationModel, params: dict[str, Any], context: dict[str, Any], **_: Any
    ) -> Answer | None:
        if not self.active or CONTEXT_KEY in context:
            return None
        operation = model.name
        request = _request(params)
        tables = _tables(operation, request)
        detail: dict[str, Any] = {"operation": operation, "table": ", ".join(sorted(tables))}
        notes = context[CONTEXT_KEY] = _Notes(detail)
        table = request.get("TableName")
        if operation == "UpdateItem" and table == self._tables.effects and APPLIED_ATTRIBUTE in _added(request):
            notes.effect_key = str(((request.get("Key") or {}).get(KEY_ATTRIBUTE) or {}).get("S"))
            if self._dice.fires(CRASH_BEFORE_EFFECT):
                self._crash(CRASH_BEFORE_EFFECT, {**detail, "effect_key": notes.effect_key})
            # From the moment it is sent: a process that ends before the answer may have applied it.
            self.windows.open(notes.effect_key)
        if self._throttleable(operation, tables) and self._dice.fires(THROTTLE_DYNAMODB):
            return self._throttle(model, params, detail)
        if operation == "TransactWriteItems" and self._dice.fires(TRANSACTION_CONFLICT):
            return self._conflict(model, params, request, detail)
        if table == self._tables.idempotency:
            if operation == "UpdateItem" and _sets_completed(request):
                notes.save = True
            elif operation in ("PutItem", "DeleteItem"):
                notes.idempotency_write = operation
        return None

    def after_dynamodb(
        self, http_response: AWSResponse, parsed: dict[str, Any], context: dict[str, Any], **_: Any
    ) -> None:
        notes = _Notes.first_after(context)
        if not self.active or notes is None:
            return
        if not _succeeded(http_response, parsed):
            if notes.effect_key is not None:  # a failed condition, say: nothing took place
                self.windows.drop(notes.effect_key)
            return
        if notes.idempotency_write == "PutItem":  # this thread's next run begins: an earlier window was dealt with
            self.windows.close()
        elif notes.effect_key is not None:
            if self._dice.fires(CRASH_AFTER_EFFECT):
                self._crash(CRASH_AFTER_EFFECT, {**notes.detail, "effect_key": notes.effect_key})
        elif notes.save or notes.idempotency_write == "DeleteItem":  # saved, or failed and to run again: closed
            self.windows.close()
            if notes.save and self._dice.fires(CRASH_AFTER_SAVE):
                self._crash(CRASH_AFTER_SAVE, notes.detail)

    def _throttleable(self, operation: str, tables: set[str]) -> bool:
        """A data operation on a throttled table, never one that touches the effects ledger too."""
        return (
            operation in DYNAMODB_DATA_OPERATIONS
            and bool(tables & self._tables.throttled)
            and self._tables.effects not in tables
        )

    def _throttle(self, model: OperationModel, params: Mapping[str, Any], detail: dict[str, Any]) -> Answer:
        code = self._dice.choice(sorted(THROTTLE_ERRORS))
        # The job fails here; if its effect already took place, its retry may apply it again.
        window = self.windows.close()
        self._events.record(THROTTLE_DYNAMODB, {**detail, "error": code, "window_effect_keys": sorted(window)})
        return _error(model, params["url"], "dynamodb", BAD_REQUEST, code, {"message": THROTTLE_ERRORS[code]})

    def _conflict(
        self, model: OperationModel, params: Mapping[str, Any], request: Mapping[str, Any], detail: dict[str, Any]
    ) -> Answer:
        items = len(request.get("TransactItems") or [])
        self._events.record(TRANSACTION_CONFLICT, {**detail, "items": items})
        reasons = [{"Code": TRANSACTION_CONFLICT_CODE, "Message": TRANSACTION_CONFLICT_MESSAGE}] * items
        message = (
            "Transaction cancelled, please refer cancellation reasons for specific reasons "
            f"[{', '.join([TRANSACTION_CONFLICT_CODE] * items)}]"
        )
        body = {"Message": message, "CancellationReasons": reasons}
        return _error(model, params["url"], "dynamodb", BAD_REQUEST, "TransactionCanceledException", body)

    # -- SQS -------------------------------------------------------------------------------

    def before_sqs(
        self, model: OperationModel, params: dict[str, Any], context: dict[str, Any], **_: Any
    ) -> Answer | None:
        if not self.active or CONTEXT_KEY in context:
            return None
        operation = model.name
        request = _request(params)
        queue = _queue_name(str(request.get("QueueUrl", "")))
        detail: dict[str, Any] = {"operation": operation, "queue": queue}
        notes = context[CONTEXT_KEY] = _Notes(detail)
        if operation in SQS_DELETES and queue in self._tables.job_queues and self._dice.fires(CRASH_BEFORE_DELETE):
            self._crash(CRASH_BEFORE_DELETE, detail)
        if operation == "SendMessage" and queue.endswith(DLQ_SUFFIXES) and self._dice.fires(DLQ_SEND_FAILURE):
            self._events.record(DLQ_SEND_FAILURE, detail)
            body = {"message": INTERNAL_ERROR_MESSAGE}
            return _error(model, params["url"], "sqs", INTERNAL_SERVER_ERROR, INTERNAL_ERROR, body)
        if operation == "SendMessageBatch":
            notes.batch_send, notes.relay = True, _is_relay_thread()
            detail["entries"] = len(request.get("Entries") or [])
            if notes.relay and self._dice.fires(RELAY_CRASH_BEFORE_SEND):
                self._crash(RELAY_CRASH_BEFORE_SEND, detail)
        return None

    def after_sqs(self, http_response: AWSResponse, parsed: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        notes = _Notes.first_after(context)
        if not self.active or notes is None or not notes.batch_send or not _succeeded(http_response, parsed):
            return
        if notes.relay and self._dice.fires(RELAY_CRASH_AFTER_SEND):
            self._crash(RELAY_CRASH_AFTER_SEND, notes.detail)
        successful: list[dict[str, Any]] = parsed.get("Successful") or []
        if successful and self._dice.fires(SEND_BATCH_PARTIAL):
            chosen = self._dice.subset(len(successful))
            moved = [successful[index] for index in chosen]
            self._events.record(SEND_BATCH_PARTIAL, {**notes.detail, "failed_ids": [entry["Id"] for entry in moved]})
            parsed["Successful"] = [entry for index, entry in enumerate(successful) if index not in chosen]
            parsed.setdefault("Failed", []).extend(
                {"Id": entry["Id"], "SenderFault": False, "Code": INTERNAL_ERROR, "Message": INTERNAL_ERROR_MESSAGE}
                for entry in moved
            )

    # -- windows and crashes ---------------------------------------------------------------

    def _crash(self, fault: str, detail: Mapping[str, Any]) -> None:
        """Record, then end the process; every open window ends with it (the journal shows which)."""
        self._crashing.acquire()
        try:
            self._events.record(fault, {**detail, "open_windows": self.windows.all()})
            self._crash_with(CRASH_EXIT_CODE)
        finally:  # reached only when ``crash`` returns or raises (tests)
            self._crashing.release()


class Installation:
    """Installed fault hooks; ``uninstall`` (or leaving the ``with`` block) makes them inert and removes them."""

    def __init__(self, hooks: _Hooks, clients: Sequence[Any]) -> None:
        self._hooks = hooks
        self._handlers: list[tuple[str, Callable[..., Any]]] = [
            ("before-call.dynamodb", hooks.before_dynamodb),
            ("after-call.dynamodb", hooks.after_dynamodb),
            ("before-call.sqs", hooks.before_sqs),
            ("after-call.sqs", hooks.after_sqs),
        ]
        self._clients = list(clients)
        BUILTIN_HANDLERS.extend(self._handlers)
        for client in self._clients:
            for event, handler in self._handlers:
                client.meta.events.register(event, handler)

    def uninstall(self) -> None:
        """Idempotent."""
        global _current
        if not self._hooks.active:
            return
        # Sessions made meanwhile keep their copies of the handlers: inert from now on.
        self._hooks.active = False
        self._hooks.windows.release()
        for handler in self._handlers:
            while handler in BUILTIN_HANDLERS:
                BUILTIN_HANDLERS.remove(handler)
        for client in self._clients:
            for event, function in self._handlers:
                client.meta.events.unregister(event, function)
        with _install_lock:
            if _current is self:
                _current = None

    def __enter__(self) -> "Installation":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.uninstall()


_install_lock = threading.Lock()
_current: Installation | None = None


def install(
    mix: FaultMix,
    rng: random.Random,
    events: Path,
    tables: ChaosTables,
    *,
    clients: Sequence[Any] = (),
    crash: Crash = os._exit,
) -> Installation:
    """Install the fault hooks for every botocore client made from now on, and for ``clients``.

    ``rng`` is seeded by the caller (seed and child generation); ``events`` is appended to (its
    folder is made). One installation per process at a time; ``crash`` ends the process (tests
    pass one that raises).
    """
    global _current
    events.parent.mkdir(parents=True, exist_ok=True)
    with _install_lock:
        if _current is not None:
            raise RuntimeError("chaos faults are already installed in this process; uninstall them first")
        _current = Installation(_Hooks(mix, rng, events, tables, crash), clients)
        return _current


@contextmanager
def installed(
    mix: FaultMix,
    rng: random.Random,
    events: Path,
    tables: ChaosTables,
    *,
    clients: Sequence[Any] = (),
    crash: Crash = os._exit,
) -> Iterator[Installation]:
    """``install`` for the block's duration."""
    with install(mix, rng, events, tables, clients=clients, crash=crash) as installation:
        yield installation


def _event_files(path: Path | Iterable[Path]) -> list[Path]:
    paths = [path] if isinstance(path, Path) else list(path)
    files: list[Path] = []
    for each in paths:
        files.extend(sorted(each.glob("*.jsonl")) if each.is_dir() else [each])
    return files


def read_event_records(path: Path | Iterable[Path]) -> list[dict[str, Any]]:
    """The events of a file, a folder of ``*.jsonl`` files, or several; a missing file has none.

    A last line without its newline was cut short by a SIGKILL during the write: its fault had
    not acted yet, so it is left out. Any other line that is not an event is an error.
    """
    records: list[dict[str, Any]] = []
    for file in _event_files(path):
        if not file.exists():
            continue
        text = file.read_text()
        lines = text.split("\n")
        for number, line in enumerate(lines[:-1], start=1):  # the last piece: "" or a torn write
            try:
                record = json.loads(line)
            except ValueError:
                raise ValueError(f"{file}:{number}: not a fault event: {line[:80]!r}") from None
            if not isinstance(record, dict) or record.get("fault") not in FAULTS:
                raise ValueError(f"{file}:{number}: not a fault event: {line[:80]!r}")
            records.append(record)
    return records


def read_events(path: Path | Iterable[Path]) -> Counter[str]:
    """How many times each fault was injected, from the events file(s)."""
    return Counter(str(record["fault"]) for record in read_event_records(path))


def window_faults_by_key(path: Path | Iterable[Path]) -> Counter[str]:
    """Effect key -> faults that ended a window of it: throttles, and process ends (see the module docstring)."""
    counts = Counter(
        str(key)
        for record in read_event_records(path)
        if record["fault"] == THROTTLE_DYNAMODB
        for key in record["detail"].get("window_effect_keys", [])
    )
    for file in _event_files(path):
        counts.update(_cut_windows(windows_journal(file)))
    return counts


def _cut_windows(journal: Path) -> Counter[str]:
    """The effect keys of windows still open when their process ended, from a journal."""
    if not journal.exists():
        return Counter()
    windows: dict[tuple[int, int], set[str]] = {}
    for number, line in enumerate(journal.read_text().split("\n")[:-1], start=1):  # the last piece: "" or torn
        try:
            entry = json.loads(line)
            window = windows.setdefault((int(entry["pid"]), int(entry["thread"])), set())
            op = entry["op"]
        except (ValueError, KeyError, TypeError):
            raise ValueError(f"{journal}:{number}: not a window journal line: {line[:80]!r}") from None
        if op == "open":
            window.add(str(entry["key"]))
        elif op == "drop":
            window.discard(str(entry["key"]))
        else:
            window.clear()
    return Counter(key for keys in windows.values() for key in keys)
