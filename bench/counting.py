"""Count every AWS request the process makes, by service, operation and the queue or table it names.

The hook enters as strict mode's checks and chaos's faults do (conveyor.local.strict.client,
chaos.faults): handlers appended to botocore's BUILTIN_HANDLERS, which a botocore session copies
when it is made, so every client of a session made afterwards carries them and no code under
measure is touched. ``counting`` also makes boto3's default session anew, so the clients the
local runtime makes from then on are counted, while those made before (the embedded AWS's own,
which stand in for AWS itself) are not.

A call is counted once when botocore builds its parameters, plus once per retry botocore made
(``RetryAttempts`` in the response's metadata): what AWS would bill.
"""

import bisect
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import boto3
from botocore.handlers import BUILTIN_HANDLERS
from botocore.model import OperationModel

# Where the build-parameters handler leaves the call's key for the after-call handler.
CONTEXT_KEY = "conveyor.bench.call"


@dataclass(frozen=True, order=True)
class Call:
    """One kind of request: ``sqs.ReceiveMessage`` on queue ``conveyor-critical``, say."""

    service: str
    operation: str
    # The queue's or table's name, "" for a request that names neither (GetRecords, ListQueues).
    resource: str = ""

    @property
    def name(self) -> str:
        """``service.Operation``, botocore's names: the key of requests_per_job."""
        return f"{self.service}.{self.operation}"


Counts = Counter[Call]


def resource_of(params: Mapping[str, Any]) -> str:
    """The queue or table a request's parameters name; the tables of a batch or transaction, joined by commas."""
    if url := params.get("QueueUrl"):
        return str(url).rstrip("/").rsplit("/", 1)[-1]
    if table := params.get("TableName"):
        return str(table)
    if arn := params.get("StreamArn"):  # arn:aws:dynamodb:region:account:table/NAME/stream/LABEL
        return str(arn).split(":table/", 1)[-1].split("/", 1)[0]
    if batch := params.get("RequestItems"):  # BatchGetItem, BatchWriteItem
        return ",".join(sorted(batch))
    if actions := params.get("TransactItems"):  # each action is {"Put": {"TableName": ...}}, say
        return ",".join(sorted({table for action in actions for table in _tables(action)}))
    return ""


def _tables(action: Mapping[str, Any]) -> Iterator[str]:
    for operation in action.values():
        if isinstance(operation, Mapping) and "TableName" in operation:
            yield str(operation["TableName"])


class RequestCounter:
    """Thread-safe counts of the requests made since it was installed."""

    def __init__(self) -> None:
        self._counts: Counts = Counter()
        # When each kind of call was made (``time.monotonic()``), in order.
        self._times: defaultdict[Call, list[float]] = defaultdict(list)
        self._lock = threading.Lock()

    def snapshot(self) -> Counts:
        with self._lock:
            return Counter(self._counts)

    def since(self, before: Counts) -> Counts:
        """What was counted after ``before`` (a snapshot) was taken."""
        return self.snapshot() - before

    def first_after(self, call: Call, since: float) -> float | None:
        """When the first ``call`` at or after ``since`` (``time.monotonic()``) was made, if one was."""
        with self._lock:
            times = self._times.get(call, [])
            index = bisect.bisect_left(times, since)
            return times[index] if index < len(times) else None

    def _add(self, call: Call, count: int) -> None:
        with self._lock:
            self._counts[call] += count

    def on_parameters(
        self, params: Mapping[str, Any], model: OperationModel, context: dict[str, Any], **_: Any
    ) -> None:
        call = Call(model.service_model.service_name, model.name, resource_of(params))
        context[CONTEXT_KEY] = call
        with self._lock:
            self._counts[call] += 1
            self._times[call].append(time.monotonic())

    def on_response(self, parsed: Mapping[str, Any], context: Mapping[str, Any], **_: Any) -> None:
        retries = int(parsed.get("ResponseMetadata", {}).get("RetryAttempts", 0))
        if retries and CONTEXT_KEY in context:
            self._add(context[CONTEXT_KEY], retries)


@contextmanager
def counting() -> Iterator[RequestCounter]:
    """Count the requests of every client made inside the block; the hooks are removed after it."""
    counter = RequestCounter()
    handlers: list[tuple[str, Callable[..., None]]] = [
        ("before-parameter-build", counter.on_parameters),
        ("after-call", counter.on_response),
    ]
    BUILTIN_HANDLERS.extend(handlers)
    boto3.setup_default_session()
    try:
        yield counter
    finally:
        for handler in handlers:
            BUILTIN_HANDLERS.remove(handler)
        boto3.DEFAULT_SESSION = None


@contextmanager
def builtin_handlers_restored() -> Iterator[None]:
    """botocore's BUILTIN_HANDLERS as they were, once the block ends.

    An in-process moto's block installs process-wide hooks (strict mode's, moto_concurrency's,
    conveyor.testing's record of sends); those it added leave with it, so the rows after it make
    their clients as before.
    """
    before = list(BUILTIN_HANDLERS)
    try:
        yield
    finally:
        for handler in [handler for handler in BUILTIN_HANDLERS if handler not in before]:
            BUILTIN_HANDLERS.remove(handler)


def by_operation(counts: Counts) -> Counter[str]:
    """The counts by ``service.Operation``, whatever queue or table each named."""
    operations: Counter[str] = Counter()
    for call, count in counts.items():
        operations[call.name] += count
    return operations


def per_job(counts: Counts, jobs: int, keep: Callable[[Call], bool] = lambda call: True) -> dict[str, float]:
    """Requests per job by ``service.Operation``, of the calls ``keep`` accepts, largest first."""
    totals: Counter[str] = Counter()
    for call, count in counts.items():
        if keep(call):
            totals[call.name] += count
    return {name: count / jobs for name, count in sorted(totals.items(), key=lambda item: (-item[1], item[0]))}
