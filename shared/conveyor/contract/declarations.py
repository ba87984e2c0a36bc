"""Declarations of queues and job types: the single source the stack, the runtime and the CLI read.

A declaration is a frozen value checked when it is built, so a setting that cannot be
deployed fails at import with one line naming the declaration and the rule it breaks,
long before CloudFormation would reject it (or, worse, accept it and lose messages).
"""

import json
import random
import re
import string
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ValidationError

from conveyor.contract import limits, naming
from conveyor.contract.destinations import check_retry_budget
from conveyor.contract.durations import format_duration
from conveyor.contract.envelope import summarize_validation_error
from conveyor.contract.errors import ContractError, require
from conveyor.contract.job_context import JobContext
from conveyor.contract.reasons import Reason

P = TypeVar("P", bound=BaseModel)

QUEUE_NAME_PATTERN = re.compile(r"^[a-z][a-z0-9-]{0,39}$")
JOB_NAME_PATTERN = re.compile(r"^[a-z][a-z0-9_]{0,63}$")

# The harness counts attempts itself and dead-letters with a reason when they run out.
# The queue's redrive policy is only a backstop for what the harness cannot see (a crash,
# a timeout), so it sits this many receives above the highest declared attempt count.
REDRIVE_BACKSTOP_MARGIN = 3
# Upper bound on declared attempts: Sidekiq's default of 25 spans about three weeks of
# backoff, and anything longer belongs in a schedule, not a retry loop.
MAX_ATTEMPTS_LIMIT = 25
# 2**62 seconds is far beyond any cap; bounding the exponent keeps the float finite.
_MAX_EXPONENT = 62
# Default payload budget: large data goes by reference (an S3 key), not in the message.
DEFAULT_MAX_PAYLOAD_BYTES = 256 * 1024
# How long a dedupe_key given at enqueue keeps a second enqueue from making a second job
# (conveyor.sdk.dedupe). A day covers a producer's retries and a replayed request; SQS FIFO's
# own deduplication lasts five minutes. At most SQS's longest retention: no job lives longer.
DEFAULT_DEDUPE_WINDOW = timedelta(hours=24)
MIN_DEDUPE_WINDOW = timedelta(seconds=1)
MAX_DEDUPE_WINDOW = limits.SQS_MAX_RETENTION


def full_jitter(attempt: int, base: timedelta, cap: timedelta, rng: random.Random) -> timedelta:
    """Backoff after failed attempt ``attempt`` (1-based): uniform in [0, min(cap, base * 2**(attempt-1))].

    Full jitter spreads a burst of failures evenly instead of retrying them in lockstep
    (AWS Architecture Blog, "Exponential Backoff And Jitter").
    """
    exponent = min(attempt - 1, _MAX_EXPONENT)
    ceiling = min(cap.total_seconds(), base.total_seconds() * 2**exponent)
    return timedelta(seconds=rng.uniform(0, ceiling))


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how far apart the harness retries a job before dead-lettering it.

    Delays grow as ``base * 2**attempt`` up to ``cap``, with full jitter; the harness gives
    up after ``max_attempts`` attempts or ``max_wall_time`` since enqueue, whichever is first.
    """

    max_attempts: int = 5
    base: timedelta = timedelta(seconds=2)
    cap: timedelta = timedelta(minutes=15)
    max_wall_time: timedelta = timedelta(hours=24)

    def delay(self, attempt: int, rng: random.Random) -> timedelta:
        """Backoff after failed attempt ``attempt`` (1-based), with full jitter (``full_jitter``)."""
        return full_jitter(attempt, self.base, self.cap, rng)

    def check(self, where: str) -> None:
        require(
            1 <= self.max_attempts <= MAX_ATTEMPTS_LIMIT,
            where,
            f"retry.max_attempts must be between 1 and {MAX_ATTEMPTS_LIMIT}, got {self.max_attempts}",
        )
        require(self.base > timedelta(0), where, "retry.base must be positive")
        require(
            self.base <= self.cap <= limits.SQS_MAX_VISIBILITY_TIMEOUT,
            where,
            f"retry.cap must lie between retry.base and the SQS visibility maximum of "
            f"{format_duration(limits.SQS_MAX_VISIBILITY_TIMEOUT)}, got {format_duration(self.cap)}",
        )
        require(self.max_wall_time > timedelta(0), where, "retry.max_wall_time must be positive")


@dataclass(frozen=True)
class Queue:
    """A work queue with its DLQ and its worker function.

    ``age_objective`` is the latency promise: the oldest message should never wait longer,
    and the queue's age alarm fires when it does. ``latency_objective`` bounds p99 enqueue-to-
    done per job type (default: the age objective plus the function timeout), and
    ``max_retry_rate`` the share of runs that may fail and retry. ``reserved_concurrency``
    guarantees the worker capacity no other function in the account can take. ``retry_budget``
    enforces a retry rate: retries over that share of first attempts in ``budget_window`` are
    dead-lettered with reason ``retry_budget_exhausted`` instead of adding load (the destination's
    own budget, conveyor.contract.destinations, does the same per service called).
    ``scale_on_age`` lets a controller move the mapping's MaximumConcurrency between ``scale_min``
    (default: ``max_concurrency``) and ``scale_max`` as the oldest message's age crosses
    ``age_objective`` (conveyor.worker.scale_on_age).
    """

    name: str
    age_objective: timedelta
    function_timeout: timedelta = timedelta(seconds=30)
    memory_mb: int = 256
    batch_size: int = 10
    batching_window: timedelta = timedelta(0)
    max_concurrency: int = 10
    reserved_concurrency: int | None = None
    retention: timedelta = timedelta(days=4)
    fifo: bool = False
    visibility_timeout: timedelta | None = None
    latency_objective: timedelta | None = None
    max_retry_rate: float = 0.1
    retry_budget: float | None = None
    budget_window: timedelta = timedelta(minutes=5)
    scale_on_age: bool = False
    scale_min: int | None = None
    scale_max: int | None = None

    def __post_init__(self) -> None:
        where = f"queue {self.name!r}"
        check_retry_budget(self.retry_budget, self.budget_window, where)
        require(self.name not in naming.OWN_QUEUES, where, "the name is reserved for one of Conveyor's own queues")
        require(
            0 < self.max_retry_rate < 1, where, f"max_retry_rate must lie between 0 and 1, got {self.max_retry_rate}"
        )
        require(
            self.latency_objective is None or self.latency_objective > timedelta(0),
            where,
            "latency_objective must be positive",
        )
        require(
            bool(QUEUE_NAME_PATTERN.match(self.name)),
            where,
            f"name must match {QUEUE_NAME_PATTERN.pattern}",
        )
        require(
            timedelta(seconds=1) <= self.function_timeout <= limits.LAMBDA_MAX_TIMEOUT,
            where,
            f"function_timeout must be between 1s and {format_duration(limits.LAMBDA_MAX_TIMEOUT)}",
        )
        require(
            limits.LAMBDA_MIN_MEMORY_MB <= self.memory_mb <= limits.LAMBDA_MAX_MEMORY_MB,
            where,
            f"memory_mb must be between {limits.LAMBDA_MIN_MEMORY_MB} and {limits.LAMBDA_MAX_MEMORY_MB}",
        )
        self._check_batching(where)
        self._check_concurrency(where)
        self._check_scaling(where)
        self._check_timing(where)

    def _check_batching(self, where: str) -> None:
        max_batch = limits.ESM_MAX_BATCH_SIZE_FIFO if self.fifo else limits.ESM_MAX_BATCH_SIZE_STANDARD
        require(
            1 <= self.batch_size <= max_batch,
            where,
            f"batch_size must be between 1 and {max_batch} on a {'FIFO' if self.fifo else 'standard'} queue",
        )
        require(
            timedelta(0) <= self.batching_window <= limits.ESM_MAX_BATCHING_WINDOW,
            where,
            f"batching_window must be between 0 and {format_duration(limits.ESM_MAX_BATCHING_WINDOW)}",
        )
        require(
            not (self.fifo and self.batching_window),
            where,
            "a FIFO queue cannot have a batching_window (Lambda does not batch FIFO by time)",
        )
        require(
            self.batch_size <= limits.ESM_MAX_BATCH_SIZE_WITHOUT_WINDOW or bool(self.batching_window),
            where,
            f"batch_size above {limits.ESM_MAX_BATCH_SIZE_WITHOUT_WINDOW} needs a batching_window",
        )

    def _check_concurrency(self, where: str) -> None:
        require(
            limits.ESM_MIN_MAX_CONCURRENCY <= self.max_concurrency <= limits.ESM_MAX_MAX_CONCURRENCY,
            where,
            f"max_concurrency must be between {limits.ESM_MIN_MAX_CONCURRENCY} and {limits.ESM_MAX_MAX_CONCURRENCY}",
        )
        require(
            self.reserved_concurrency is None or self.reserved_concurrency >= self.max_concurrency,
            where,
            f"reserved_concurrency ({self.reserved_concurrency}) must not be below max_concurrency "
            f"({self.max_concurrency}), or the event source would be throttled by its own function",
        )

    def _check_scaling(self, where: str) -> None:
        """The bounds the age controller keeps MaximumConcurrency within: Lambda's range, around the declared value."""
        require(
            self.scale_on_age or (self.scale_min is None and self.scale_max is None),
            where,
            "scale_min and scale_max need scale_on_age=True",
        )
        if not self.scale_on_age:
            return
        require(
            self.scale_max is not None,
            where,
            "scale_on_age needs scale_max, the highest MaximumConcurrency the controller may set",
        )
        low, high = self.scale_bounds
        for field_name, value in (("scale_min", low), ("scale_max", high)):
            require(
                limits.ESM_MIN_MAX_CONCURRENCY <= value <= limits.ESM_MAX_MAX_CONCURRENCY,
                where,
                f"{field_name} must be between {limits.ESM_MIN_MAX_CONCURRENCY} and "
                f"{limits.ESM_MAX_MAX_CONCURRENCY} (Lambda's MaximumConcurrency range), got {value}",
            )
        require(self.scale_min is None or low <= high, where, f"scale_min ({low}) must not be above scale_max ({high})")
        require(
            low <= self.max_concurrency <= high,
            where,
            f"max_concurrency ({self.max_concurrency}) must lie between scale_min ({low}) and scale_max ({high})",
        )
        require(
            self.reserved_concurrency is None or self.reserved_concurrency >= high,
            where,
            f"reserved_concurrency ({self.reserved_concurrency}) must not be below scale_max ({high}), "
            "or scaling up would throttle the queue's own batches",
        )

    @property
    def scale_bounds(self) -> tuple[int, int]:
        """(lowest, highest) MaximumConcurrency the age controller may set; both the declared value without scaling."""
        return (
            self.max_concurrency if self.scale_min is None else self.scale_min,
            self.max_concurrency if self.scale_max is None else self.scale_max,
        )

    def _check_timing(self, where: str) -> None:
        require(
            limits.SQS_MIN_RETENTION <= self.retention < limits.SQS_MAX_RETENTION,
            where,
            f"retention must be at least {format_duration(limits.SQS_MIN_RETENTION)} and under "
            f"{format_duration(limits.SQS_MAX_RETENTION)}, so the DLQ (which keeps the original enqueue "
            "time) can retain messages longer than the source",
        )
        require(
            timedelta(0) < self.age_objective < self.retention,
            where,
            "age_objective must be positive and shorter than retention",
        )
        minimum = self.function_timeout * limits.VISIBILITY_TO_TIMEOUT_RATIO
        require(
            self.effective_visibility_timeout >= minimum,
            where,
            f"visibility_timeout {format_duration(self.effective_visibility_timeout)} is under "
            f"{limits.VISIBILITY_TO_TIMEOUT_RATIO} x function_timeout ({format_duration(minimum)})",
        )
        require(
            self.effective_visibility_timeout <= limits.SQS_MAX_VISIBILITY_TIMEOUT,
            where,
            f"visibility_timeout must not exceed {format_duration(limits.SQS_MAX_VISIBILITY_TIMEOUT)}",
        )

    @property
    def effective_latency_objective(self) -> timedelta:
        """The p99 enqueue-to-done promise: declared, or waiting up to the age objective then one run."""
        if self.latency_objective is not None:
            return self.latency_objective
        return self.age_objective + self.function_timeout

    @property
    def effective_visibility_timeout(self) -> timedelta:
        """The declared visibility timeout, or the AWS-recommended 6 x the function timeout."""
        if self.visibility_timeout is not None:
            return self.visibility_timeout
        return self.function_timeout * limits.VISIBILITY_TO_TIMEOUT_RATIO


ATTRIBUTE_NAME_PATTERN = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,254}$")


@dataclass(frozen=True)
class Table:
    """A DynamoDB table the jobs use: created beside the queues, granted to every worker.

    Workers find it through the environment variable ``naming.table_env(name)``; locally it
    is ``<prefix>-<name>``.
    """

    name: str
    key: str
    ttl_attribute: str | None = None

    def __post_init__(self) -> None:
        where = f"table {self.name!r}"
        require(bool(QUEUE_NAME_PATTERN.match(self.name)), where, f"name must match {QUEUE_NAME_PATTERN.pattern}")
        require(self.name not in naming.OWN_TABLES, where, "the name is reserved for one of Conveyor's own tables")
        for attribute in (self.key, self.ttl_attribute):
            require(
                attribute is None or bool(ATTRIBUTE_NAME_PATTERN.match(attribute)),
                where,
                f"attribute name {attribute!r} is not a valid DynamoDB attribute name",
            )


# A new item as a stream record carries it, deserialized: numbers are Decimal, sets are sets.
StreamImage = Mapping[str, Any]


@dataclass(frozen=True)
class StreamRule:
    """Every new item of a declared table that ``when`` accepts becomes a job of type ``job``.

    For producers that only write domain rows: ``StreamRule("charge-new-orders", table="orders",
    job="charge_order", when=lambda item: item["status"] == "NEW", payload=lambda item: {...})``.
    The table's stream feeds the same relay as the outbox, with the same guarantees; only
    inserts count, so an update never enqueues a job twice.
    """

    name: str
    table: str
    job: str
    when: Callable[[StreamImage], bool]
    payload: Callable[[StreamImage], Mapping[str, Any]]
    # The job's dedupe key from the new item (``lambda item: f"signup-{item['user_id']}"``): a second
    # item with the same key within the job type's dedupe_window makes no second job.
    dedupe_key: Callable[[StreamImage], str] | None = None

    def __post_init__(self) -> None:
        where = f"stream rule {self.name!r}"
        require(bool(QUEUE_NAME_PATTERN.match(self.name)), where, f"name must match {QUEUE_NAME_PATTERN.pattern}")
        require(callable(self.when) and callable(self.payload), where, "when and payload must be callables")
        require(self.dedupe_key is None or callable(self.dedupe_key), where, "dedupe_key must be a callable or None")


Upcaster = Callable[[dict[str, Any]], dict[str, Any]]
Handler = Callable[[P, JobContext], object]


@dataclass(frozen=True)
class JobType(Generic[P]):
    """A kind of job: its payload contract, the queue it runs on, and how it is retried.

    Projects declare one with ``@job`` (conveyor.sdk.jobs), whose ``Job`` adds a typed ``enqueue``;
    this class is the part the worker, the stack and the CLI read, free of the SDK.

    ``upcasters[k]`` turns version-k data into version k+1, so a message written by an older
    producer still runs. ``idempotency_key`` is a template on payload fields such as
    ``"{order_id}#charge_v1"``; without it the envelope's ``dedupe_key``, else its ``id``, is
    the key. A ``dedupe_key`` given at enqueue also makes a second enqueue with the same key,
    within ``dedupe_window``, return the first job's id instead of making a job (docs/contracts.md).
    ``retry_on`` and ``permanent_on`` classify the job's own exception types.
    ``destinations`` names the declared destinations the handler calls: the harness takes their
    tokens and slots before it runs and snoozes the job when one is not available, so a job
    never half-runs because its second call is limited.
    """

    name: str
    queue: str
    model: type[P]
    handler: Handler[P]
    version: int = 1
    upcasters: Mapping[int, Upcaster] = field(default_factory=dict)
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    timeout: timedelta | None = None
    idempotency_key: str | None = None
    retry_on: tuple[type[BaseException], ...] = ()
    permanent_on: tuple[type[BaseException], ...] = ()
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES
    destinations: tuple[str, ...] = ()
    dedupe_window: timedelta = DEFAULT_DEDUPE_WINDOW

    def __post_init__(self) -> None:
        where = f"job type {self.name!r}"
        require(
            isinstance(self.dedupe_window, timedelta) and MIN_DEDUPE_WINDOW <= self.dedupe_window <= MAX_DEDUPE_WINDOW,
            where,
            f"dedupe_window must be between {format_duration(MIN_DEDUPE_WINDOW)} and "
            f"{format_duration(MAX_DEDUPE_WINDOW)}, got {self.dedupe_window!r}",
        )
        require(
            isinstance(self.destinations, tuple) and all(isinstance(name, str) for name in self.destinations),
            where,
            f"destinations must be a tuple of destination names, got {self.destinations!r}",
        )
        require(len(set(self.destinations)) == len(self.destinations), where, "destinations names one twice")
        require(
            bool(JOB_NAME_PATTERN.match(self.name)),
            where,
            f"name must match {JOB_NAME_PATTERN.pattern}",
        )
        require(
            self.timeout is None or self.timeout > timedelta(0),
            where,
            "timeout must be positive",
        )
        self.retry.check(where)
        self._check_contract(where)

    def _check_contract(self, where: str) -> None:
        require(
            isinstance(self.model, type) and issubclass(self.model, BaseModel),
            where,
            "model must be a pydantic model (extend conveyor.contract.payloads.Payload)",
        )
        require(
            self.model.model_config.get("extra") == "forbid",
            where,
            f"model {self.model.__name__} must forbid extra fields (extend conveyor.contract.payloads.Payload)",
        )
        require(self.version >= 1, where, f"version must be 1 or more, got {self.version}")
        stray = sorted(set(self.upcasters) - set(range(1, self.version)))
        require(
            not stray,
            where,
            f"upcasters {stray} do not upgrade an older version (current version is {self.version})",
        )
        if self.idempotency_key is not None:
            fields_used = {name for _, name, _, _ in string.Formatter().parse(self.idempotency_key) if name}
            unknown = sorted(fields_used - set(self.model.model_fields))
            require(bool(fields_used), where, "idempotency_key template names no payload field")
            require(
                not unknown,
                where,
                f"idempotency_key {self.idempotency_key!r} names {unknown}, not fields of {self.model.__name__}",
            )
        require(
            0 < self.max_payload_bytes <= limits.MAX_PAYLOAD_BYTES,
            where,
            f"max_payload_bytes must be between 1 and {limits.MAX_PAYLOAD_BYTES}: SQS's maximum of "
            f"{limits.SQS_MAX_MESSAGE_BYTES} bytes less {limits.DEAD_LETTER_ATTRIBUTE_BYTES} for the attributes "
            "a dead letter carries",
        )

    @property
    def supported_versions(self) -> range:
        """Versions that reach the current one through an unbroken chain of upcasters."""
        oldest = self.version
        while oldest - 1 in self.upcasters:
            oldest -= 1
        return range(oldest, self.version + 1)

    def load_payload(self, data: Mapping[str, Any], version: int) -> P:
        """Upcast ``data`` from ``version`` and validate it strictly; ContractError says why not."""
        if version not in self.supported_versions:
            raise ContractError(
                Reason.UNSUPPORTED_VERSION,
                f"{self.name} v{version} is not supported (supported: "
                f"v{self.supported_versions.start}..v{self.version})",
            )
        document = dict(data)
        for step in range(version, self.version):
            try:
                document = self.upcasters[step](document)
            except Exception as error:  # an old message that even its upcaster cannot read
                # The error's text is left out: it may quote payload values.
                raise ContractError(
                    Reason.INVALID_PAYLOAD, f"upcasting {self.name} v{step} failed: {type(error).__name__}"
                ) from error
        try:
            # Through JSON, in strict mode: no "5" for 5, but ISO strings for datetimes, as on the wire.
            return self.model.model_validate_json(json.dumps(document), strict=True)
        except ValidationError as error:
            raise ContractError(Reason.INVALID_PAYLOAD, summarize_validation_error(error)) from error

    def idempotency_key_for(self, *, job_id: str, dedupe_key: str | None, payload: BaseModel) -> str:
        if self.idempotency_key is not None:
            return self.idempotency_key.format(**payload.model_dump(mode="json"))
        return dedupe_key or job_id
