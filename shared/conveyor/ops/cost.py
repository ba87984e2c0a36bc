"""The monthly AWS bill of a job mix: measured requests per job, the declarations, a dated price table.

A model, not a meter. What one successful job of each type costs in requests, Lambda time and log
bytes comes from a profile `make bench` measured (bench/results.json, ``job_profiles``); memory,
queue type and retry windows from the topology; prices from conveyor.ops.price_table. Everything
else is an assumption, and ``assumptions`` states each one: the footer of `conveyor cost` and
docs/cost.md print them, so an estimate is never read without what it leaves out.
"""

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from conveyor.contract import limits
from conveyor.contract.durations import format_duration
from conveyor.contract.errors import ConveyorError
from conveyor.contract.topology import Topology
from conveyor.ops.price_table import CostDataError, Meter, PriceTable, Service, load_document
from conveyor.ops.rate import SECONDS_PER_MONTH
from conveyor.ops.stats import JobStats
from conveyor.ops.tables import render_table
from conveyor.worker import metrics, relay
from conveyor.worker.idempotency import record_lifetime

DAYS_PER_MONTH = SECONDS_PER_MONTH / 86_400
MIX_TOLERANCE = 1e-6
GIB = 1024**3
MILLION = 1_000_000

# SQS bills each 64 KB chunk of a request's payload as one request (https://aws.amazon.com/sqs/pricing/).
# The requests that carry message bodies, and how many messages one can carry; the others carry none.
SQS_CHUNK_BYTES = 64 * 1024
SQS_MESSAGES_PER_REQUEST = {
    "SendMessage": 1,
    "SendMessageBatch": limits.SQS_MAX_BATCH_ENTRIES,
    "ReceiveMessage": limits.SQS_MAX_RECEIVE_MESSAGES,
}
# DynamoDB on demand (https://aws.amazon.com/dynamodb/pricing/on-demand/): items of at most 1 KB, so a
# write is 1 write unit, a strongly consistent read of at most 4 KB 1 read unit, a transactional item 2.
# A TransactWriteItems call is taken to write 2 items: a row and its outbox entry (JobClient.transact).
TRANSACTIONAL = 2
TRANSACT_ITEMS_PER_CALL = 2
DYNAMODB_WRITE_UNITS = {
    "PutItem": 1,
    "UpdateItem": 1,
    "DeleteItem": 1,
    "TransactWriteItems": TRANSACTIONAL * TRANSACT_ITEMS_PER_CALL,
}
DYNAMODB_READ_UNITS = {"GetItem": 1}
ITEM_BYTES = 1024
# Of DynamoDB Streams' operations only GetRecords is billed
# (https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/CostOptimization_StreamsUsage.html).
STREAM_READ = "GetRecords"
# The local runtime publishes the workers' EMF lines to CloudWatch; on AWS, EMF costs custom metrics
# and log bytes, both counted apart, and no request.
NOT_BILLED_PER_REQUEST = frozenset({"cloudwatch", "logs"})
# Lambda's START, END and REPORT lines (with the XRAY line of a traced invocation) per invocation,
# in the text log format (https://docs.aws.amazon.com/lambda/latest/dg/monitoring-cloudwatchlogs.html).
PLATFORM_LOG_BYTES = 360
# Lambda records the first invocation each second and 5% of the rest, per function, and the rate
# cannot be changed (https://docs.aws.amazon.com/lambda/latest/dg/services-xray.html).
XRAY_RESERVOIR_PER_SECOND = 1.0
XRAY_FIXED_RATE = 0.05
TRACES_SCANNED_PER_RECORDED = 1.0

# The custom metrics every successful job writes (conveyor.worker.metrics), per job type; every relay
# writes its four each invocation; every schedule its dead man's switch. Series written only on
# failure (retries and dead letters by reason) are billed only for the hours they appear.
SUCCESS_METRICS = (metrics.SUCCEEDED, metrics.DURATION, metrics.QUEUE_WAIT, metrics.END_TO_END)
RELAY_METRICS = (relay.RELAYED, relay.DEDUPLICATED, relay.POISONED, relay.FAILED)
# The stack's alarms (infra/job_queue.py, queue_monitoring.py, outbox_relay.py, schedules.py) in alarm
# metrics: per queue, age, DLQ depth, errors, throttles and saturation; per job type, p99 latency, the
# retry rate (a metric-math alarm reading 4 metrics) and dead letters; per relay (the outbox's and one
# per streamed table) its iterator age, and the relay DLQ's depth; per schedule its dead man's switch
# (and one per shard of a sharded schedule), and the schedules DLQ's depth. For this project's topology:
# 61, as its synthesized template holds.
ALARM_METRICS_PER_QUEUE = 5
ALARM_METRICS_PER_JOB_TYPE = 6
ALARM_METRICS_PER_RELAY = 1
ALARM_METRICS_PER_SCHEDULE = 1
ALARM_METRICS_PER_DLQ = 1

FIXED = "(fixed)"
# What rounds to 1 at 3 significant figures: 999,600 shows as 1M, not 1e+03K.
ROUNDS_UP = 0.9995
LEFT_OUT = (
    "stream reads by Lambda (free), the local runtime's CloudWatch calls (EMF costs metrics and log bytes), "
    "the relay functions' own invocations, dashboards, data transfer"
)


class CostInputError(ConveyorError, ValueError):
    """A rate or mix `conveyor cost` cannot use: malformed, not above 0, or shares not summing to 1."""


class UnknownJobTypeError(CostInputError, LookupError):
    """A mix names a job type the topology does not declare."""


class _Data(BaseModel):
    model_config = ConfigDict(frozen=True, allow_inf_nan=False)


Count = Annotated[float, Field(ge=0)]


class JobProfile(_Data):
    """One successful job of a type, as measured: requests by ``service.Operation``, Lambda time, log bytes."""

    queue: str
    requests_per_job: dict[Annotated[str, Field(pattern=r"^[a-z0-9-]+\.[A-Za-z0-9]+$")], Count]
    invocations_per_job: Count
    duration_ms_per_job: Count
    log_bytes_per_job: Count


class Profile(_Data):
    """bench/results.json as far as the model reads it; the benchmark's other figures are ignored."""

    measured_at: str
    job_profiles: dict[str, JobProfile]
    # Where it was read from, for messages; not in the file.
    source: str = "profile"


def load_profile(path: Path) -> Profile:
    """The profile at ``path``; CostDataError names the file and what is wrong, or how to make one."""
    profile = load_document(Profile, path, "profile", missing="; run `make bench` to measure one, or pass --profile")
    return profile.model_copy(update={"source": f"profile {path}"})


@dataclass(frozen=True)
class Workload:
    """Jobs per second, and each job type's share of them."""

    jobs_per_second: float
    mix: Mapping[str, float]


@dataclass(frozen=True)
class Assumptions:
    """What no profile measures: the size of a message, and how long the log groups keep logs."""

    message_bytes: int = 1024
    # cdk.json's conveyor:log-retention, ONE_MONTH.
    log_retention_days: int = 30


def parse_mix(text: str) -> dict[str, float]:
    """``"a=0.2,b=0.8"`` -> {job type: share}; ``workload`` checks them against the declarations."""
    mix: dict[str, float] = {}
    for entry in text.split(","):
        name, equals, share_text = (part.strip() for part in entry.partition("="))
        try:
            share = float(share_text)
        except ValueError:
            share = math.nan
        if not (equals and name and math.isfinite(share) and share >= 0):
            raise CostInputError(f"mix entry {entry.strip()!r}: expected job_type=share, a share from 0 to 1")
        if name in mix:
            raise CostInputError(f"mix: job type {name!r} is given twice")
        mix[name] = share
    return mix


def workload(jobs_per_second: float, mix: Mapping[str, float], topology: Topology) -> Workload:
    """The workload, once every job type is declared and the shares sum to 1; a share of 0 is left out."""
    declared = [job.name for job in topology.job_types]
    for name in mix:
        if name not in declared:
            raise UnknownJobTypeError(f"unknown job type {name!r}; declared: {', '.join(declared)}")
    total = math.fsum(mix.values())
    if abs(total - 1) > MIX_TOLERANCE:
        raise CostInputError(f"mix: the shares sum to {total:.6g}, not 1")
    if not (jobs_per_second > 0 and math.isfinite(jobs_per_second)):
        raise CostInputError(f"rate: {jobs_per_second:g} jobs per second; it must be above 0")
    return Workload(jobs_per_second, {name: share for name, share in mix.items() if share})


def observed_workload(stats: Sequence[JobStats], window: timedelta) -> Workload:
    """The rate and mix of the jobs that succeeded in ``window``, from the counts `conveyor stats` reads."""
    succeeded = {entry.job_type: entry.counts.get(metrics.SUCCEEDED, 0) for entry in stats}
    total = sum(succeeded.values())
    if not total:
        raise CostDataError(f"no job succeeded in the last {format_duration(window)}; pass --rate and --mix instead")
    return Workload(total / window.total_seconds(), {name: count / total for name, count in succeeded.items() if count})


@dataclass(frozen=True)
class Line:
    """One row of the bill: a job type's monthly quantities, or the fixed costs' ("(fixed)"), and dollars."""

    name: str
    queue: str
    jobs: float
    usage: Mapping[Meter, float]
    usd: Mapping[Service, float]

    @property
    def total(self) -> float:
        return math.fsum(self.usd.values())

    @property
    def per_million_jobs(self) -> float | None:
        return self.total / self.jobs * MILLION if self.jobs else None


@dataclass(frozen=True)
class Estimate:
    """A month of a workload: a line per job type, the fixed line, and what the figures rest on."""

    workload: Workload
    lines: tuple[Line, ...]
    fixed: Line
    prices: PriceTable
    measured_at: str
    assumptions: tuple[str, ...]

    @property
    def jobs(self) -> float:
        return self.workload.jobs_per_second * SECONDS_PER_MONTH

    @property
    def total(self) -> float:
        return math.fsum(line.total for line in (*self.lines, self.fixed))

    @property
    def per_million_jobs(self) -> float:
        return self.total / self.jobs * MILLION


def estimate(
    load: Workload,
    profile: Profile,
    topology: Topology,
    prices: PriceTable,
    assumptions: Assumptions | None = None,
) -> Estimate:
    """The month's bill of ``load``; CostDataError if the profile lacks a job type or cannot be priced."""
    assumptions = assumptions or Assumptions()
    usages = {name: _usage(name, share, load, profile, topology, assumptions) for name, share in load.mix.items()}
    for name, traces in _traces(load, profile, topology).items():
        usages[name][Meter.TRACES_RECORDED] = traces
        usages[name][Meter.TRACES_SCANNED] = traces * TRACES_SCANNED_PER_RECORDED
    fixed_usage = {
        Meter.CUSTOM_METRICS: float(custom_metrics(topology)),
        Meter.ALARM_METRICS: float(alarm_metrics(topology)),
    }
    *dollars, fixed_dollars = _priced([*usages.values(), fixed_usage], prices)
    lines = tuple(
        Line(name, topology.job_type(name).queue, load.jobs_per_second * load.mix[name] * SECONDS_PER_MONTH, usage, usd)
        for (name, usage), usd in zip(usages.items(), dollars, strict=True)
    )
    fixed = Line(name=FIXED, queue="", jobs=0.0, usage=fixed_usage, usd=fixed_dollars)
    return Estimate(load, lines, fixed, prices, profile.measured_at, _assumptions(assumptions))


def _row(name: str, profile: Profile, topology: Topology) -> JobProfile:
    row = profile.job_profiles.get(name)
    if row is None:
        raise CostDataError(f"{profile.source} has no row for job type {name!r}; run `make bench` again")
    declared = topology.job_type(name).queue
    if row.queue != declared:
        raise CostDataError(
            f"{profile.source} measured job type {name!r} on queue {row.queue!r}, but it is declared on {declared!r}; "
            "run `make bench` again"
        )
    return row


def _usage(
    name: str, share: float, load: Workload, profile: Profile, topology: Topology, assumptions: Assumptions
) -> dict[Meter, float]:
    """One job type's monthly quantities of every meter but the traces (those depend on its queue's total)."""
    row = _row(name, profile, topology)
    job_type = topology.job_type(name)
    queue = topology.queue(job_type.queue)
    per_second = load.jobs_per_second * share
    jobs = per_second * SECONDS_PER_MONTH
    usage = dict.fromkeys(Meter, 0.0)
    sqs = Meter.SQS_FIFO_REQUESTS if queue.fifo else Meter.SQS_STANDARD_REQUESTS
    for operation, per_job in row.requests_per_job.items():
        meter, units = _billed(operation, per_job, assumptions.message_bytes, sqs, profile.source)
        if meter is not None:
            usage[meter] += units * jobs
    usage[Meter.LAMBDA_REQUESTS] = row.invocations_per_job * jobs
    usage[Meter.LAMBDA_GB_SECONDS] = row.duration_ms_per_job / 1000 * queue.memory_mb / 1024 * jobs
    log_bytes = row.log_bytes_per_job + row.invocations_per_job * PLATFORM_LOG_BYTES
    usage[Meter.LOG_GB_INGESTED] = log_bytes * jobs / GIB
    usage[Meter.LOG_GB_STORED] = usage[Meter.LOG_GB_INGESTED] * assumptions.log_retention_days / DAYS_PER_MONTH
    # Every job's idempotency record lives out its retry window and the DLQ's retention: a level, not a flow.
    records = per_second * record_lifetime(job_type).total_seconds()
    usage[Meter.DYNAMODB_STORAGE_GB] = usage[Meter.DYNAMODB_BACKUP_GB] = records * ITEM_BYTES / GIB
    return usage


def _billed(operation: str, per_job: float, message_bytes: int, sqs: Meter, source: str) -> tuple[Meter | None, float]:
    """The meter a profiled request counts on and its billed units per job; None for a free request."""
    service, _, action = operation.partition(".")
    if service == "sqs":
        carried = SQS_MESSAGES_PER_REQUEST.get(action)
        if carried is None or not per_job:
            return sqs, per_job
        messages = min(carried, 1 / per_job)
        return sqs, per_job * math.ceil(messages * message_bytes / SQS_CHUNK_BYTES)
    if service == "dynamodb" and action in DYNAMODB_WRITE_UNITS:
        return Meter.DYNAMODB_WRITE_UNITS, per_job * DYNAMODB_WRITE_UNITS[action]
    if service == "dynamodb" and action in DYNAMODB_READ_UNITS:
        return Meter.DYNAMODB_READ_UNITS, per_job * DYNAMODB_READ_UNITS[action]
    if service == "dynamodbstreams":
        return (Meter.DYNAMODB_STREAM_READS, per_job) if action == STREAM_READ else (None, 0.0)
    if service in NOT_BILLED_PER_REQUEST:
        return None, 0.0
    raise CostDataError(f"{source}: no pricing rule for {operation} (conveyor.ops.cost prices sqs, dynamodb, streams)")


def _traces(load: Workload, profile: Profile, topology: Topology) -> dict[str, float]:
    """Traces a month per job type: each queue's function samples its invocations as a whole."""
    invocations = {
        name: load.jobs_per_second * share * profile.job_profiles[name].invocations_per_job
        for name, share in load.mix.items()
    }
    per_queue: dict[str, float] = {}
    for name, per_second in invocations.items():
        queue = topology.job_type(name).queue
        per_queue[queue] = per_queue.get(queue, 0.0) + per_second
    traces = {}
    for name, per_second in invocations.items():
        queue_total = per_queue[topology.job_type(name).queue]
        sampled = min(queue_total, XRAY_RESERVOIR_PER_SECOND) + XRAY_FIXED_RATE * max(
            queue_total - XRAY_RESERVOIR_PER_SECOND, 0.0
        )
        traces[name] = sampled * per_second / queue_total * SECONDS_PER_MONTH if queue_total else 0.0
    return traces


def _priced(usages: Sequence[Mapping[Meter, float]], prices: PriceTable) -> list[dict[Service, float]]:
    """Dollars by service for each usage: a tiered price applies to the month's total, shared pro rata."""
    dollars = [dict.fromkeys(Service, 0.0) for _ in usages]
    for meter in Meter:
        total = math.fsum(usage.get(meter, 0.0) for usage in usages)
        if not total:
            continue
        charge = prices.prices[meter].cost(total)
        for usage, line in zip(usages, dollars, strict=True):
            line[meter.service] += charge * usage.get(meter, 0.0) / total
    return dollars


def custom_metrics(topology: Topology) -> int:
    """The custom metrics written every hour a workload runs: per job type, per relay, per schedule."""
    relays = 1 + len(topology.streamed_tables())
    return len(topology.job_types) * len(SUCCESS_METRICS) + relays * len(RELAY_METRICS) + schedule_series(topology)


def schedule_series(topology: Topology) -> int:
    """ScheduleSucceeded's series, and so the dead man's alarms: one per schedule, plus one per shard of a sharded one
    (bounded: at most MAX_SHARDS each)."""
    return sum(1 + (schedule.shards if schedule.shards > 1 else 0) for schedule in topology.schedules)


def alarm_metrics(topology: Topology) -> int:
    """The alarm metrics the stack declares for ``topology`` (see ALARM_METRICS_PER_*)."""
    relays = 1 + len(topology.streamed_tables())
    schedules = len(topology.schedules)
    return (
        len(topology.queues) * ALARM_METRICS_PER_QUEUE
        + len(topology.job_types) * ALARM_METRICS_PER_JOB_TYPE
        + relays * ALARM_METRICS_PER_RELAY
        + ALARM_METRICS_PER_DLQ
        + schedule_series(topology) * ALARM_METRICS_PER_SCHEDULE
        + (ALARM_METRICS_PER_DLQ if schedules else 0)
    )


def _assumptions(assumptions: Assumptions) -> tuple[str, ...]:
    return (
        f"a month is {SECONDS_PER_MONTH // 3600} hours; free tiers are ignored; volume tiers apply to this estimate "
        "alone, not to the rest of the account",
        f"DynamoDB items of at most {ITEM_BYTES // 1024} KB: 1 write unit a write, {TRANSACTIONAL} an item written in "
        f"a transaction ({TRANSACT_ITEMS_PER_CALL} items a TransactWriteItems), 1 read unit a strongly consistent read",
        f"messages of {assumptions.message_bytes:,} bytes (SQS bills each 64 KB of a request's payload as a request)",
        f"idempotency records of {ITEM_BYTES // 1024} KB, kept through the retry window and "
        f"{limits.SQS_MAX_RETENTION.days} days of DLQ retention, stored and backed up (point-in-time "
        "recovery); expired records DynamoDB has yet to delete are not counted",
        f"logs kept {assumptions.log_retention_days} days, uncompressed, plus {PLATFORM_LOG_BYTES} bytes of Lambda's "
        "own lines per invocation; success-path custom metrics only",
        f"X-Ray records {XRAY_RESERVOIR_PER_SECOND:g} invocation/s per function and {XRAY_FIXED_RATE:.0%} of the rest; "
        "each trace is scanned once",
    )


def render_estimate(found: Estimate) -> str:
    """Two tables, quantities then dollars, a line per job type; the total; then every assumption."""
    quantities = render_table(
        ("JOB TYPE", "QUEUE", "JOBS", "SQS REQ", "DDB WRU", "DDB RRU", "INVOCATIONS", "GB-S", "LOG GB", "TRACES"),
        [
            (
                line.name,
                line.queue,
                _count(line.jobs),
                _count(line.usage[Meter.SQS_STANDARD_REQUESTS] + line.usage[Meter.SQS_FIFO_REQUESTS]),
                _count(line.usage[Meter.DYNAMODB_WRITE_UNITS]),
                _count(line.usage[Meter.DYNAMODB_READ_UNITS]),
                _count(line.usage[Meter.LAMBDA_REQUESTS]),
                _count(line.usage[Meter.LAMBDA_GB_SECONDS]),
                _count(line.usage[Meter.LOG_GB_INGESTED]),
                _count(line.usage[Meter.TRACES_RECORDED]),
            )
            for line in found.lines
        ],
    )
    fixed = found.fixed.usage
    dollars = render_table(
        ("JOB TYPE", *(service.value.upper() for service in Service), "TOTAL $/MONTH", "$ PER 1M JOBS"),
        [
            (
                line.name,
                *(_usd(line.usd[service]) for service in Service),
                _usd(line.total),
                "-" if line.per_million_jobs is None else _usd(line.per_million_jobs),
            )
            for line in (*found.lines, found.fixed)
        ]
        + [
            (
                "total",
                *(_usd(_service_total(found, s)) for s in Service),
                _usd(found.total),
                _usd(found.per_million_jobs),
            )
        ],
    )
    table = found.prices
    return "\n".join(
        [
            f"{_count(found.jobs)} jobs a month ({found.workload.jobs_per_second:,.6g}/s) at {table.region} prices; "
            "every figure is per month",
            "",
            quantities,
            "",
            dollars,
            "",
            f"total: {_usd(found.total)} a month, {_usd(found.per_million_jobs)} per million jobs",
            f"{FIXED}: {fixed[Meter.ALARM_METRICS]:.0f} alarm metrics and {fixed[Meter.CUSTOM_METRICS]:.0f} custom "
            "metrics the stack keeps whatever the load",
            f"prices: {table.region} as of {table.as_of.isoformat()}; profile measured {found.measured_at}",
            *(f"assumed: {line}" for line in found.assumptions),
            f"not counted: {LEFT_OUT}",
        ]
    )


def estimate_json(found: Estimate) -> dict[str, Any]:
    """The estimate as `conveyor cost --json` prints it."""
    return {
        "region": found.prices.region,
        "prices_as_of": found.prices.as_of.isoformat(),
        "profile_measured_at": found.measured_at,
        "jobs_per_second": found.workload.jobs_per_second,
        "jobs_per_month": found.jobs,
        "lines": [
            {
                "job_type": line.name,
                "queue": line.queue,
                "jobs_per_month": line.jobs,
                "usage": {meter.value: quantity for meter, quantity in line.usage.items()},
                "usd": {service.value: amount for service, amount in line.usd.items()},
                "total_usd": line.total,
                "usd_per_million_jobs": line.per_million_jobs,
            }
            for line in (*found.lines, found.fixed)
        ],
        "total_usd": found.total,
        "usd_per_million_jobs": found.per_million_jobs,
        "assumptions": list(found.assumptions),
        "not_counted": LEFT_OUT,
    }


def _service_total(found: Estimate, service: Service) -> float:
    return math.fsum(line.usd[service] for line in (*found.lines, found.fixed))


def _count(value: float) -> str:
    """3 significant figures and a K/M/B/T suffix: 26,280,000,000 -> 26.3B, 999,999 -> 1M."""
    for suffix, size in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(value) >= size * ROUNDS_UP:
            return f"{float(f'{value / size:.3g}'):g}{suffix}"
    return f"{value:.3g}"


def _usd(value: float) -> str:
    return f"${value:,.2f}" if abs(value) >= 0.01 or not value else f"${value:.2g}"
