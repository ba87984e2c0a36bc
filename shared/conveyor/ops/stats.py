"""Read the harness's metrics back: counts by outcome and reason, and latency percentiles.

The same CloudWatch queries serve AWS and the local runtime (whose EMF lines are published to
the embedded CloudWatch). moto computes no percentiles (it answers a percentile query with a
server error), so locally they come from the raw values the local runtime kept, and the result
says so; CloudWatch is not asked for them there.
"""

import json
import math
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from conveyor.contract.reasons import Reason
from conveyor.contract.settings import METRICS_NAMESPACE
from conveyor.contract.topology import Topology
from conveyor.ops.tables import render_table
from conveyor.worker import metrics as names
from conveyor.worker.classify import FailureKind

PERCENTILES = (50, 95, 99)
COUNT_NAMES = tuple(names.COUNTS.values())
RETRY_REASONS = tuple(kind.value for kind in FailureKind if kind is not FailureKind.PERMANENT)
DEAD_LETTER_REASONS = tuple(reason.value for reason in Reason)
SOURCE_CLOUDWATCH = "cloudwatch"
SOURCE_RAW = "raw values kept by the local runtime (moto computes no percentiles)"
SOURCE_NONE = "unavailable"
MINUTE_S = 60


@dataclass
class JobStats:
    queue: str
    job_type: str
    counts: dict[str, int] = field(default_factory=dict)
    retried_by_reason: dict[str, int] = field(default_factory=dict)
    dead_lettered_by_reason: dict[str, int] = field(default_factory=dict)
    end_to_end_ms: dict[str, float | None] = field(default_factory=dict)
    percentiles_from: str = SOURCE_NONE


@dataclass(frozen=True)
class _Query:
    job: tuple[str, str]
    metric: str
    stat: str
    reason: str | None = None


def read_stats(
    cloudwatch: Any,
    topology: Topology,
    *,
    start: datetime,
    end: datetime,
    queue: str | None = None,
    raw_values: Path | None = None,
) -> list[JobStats]:
    jobs = [(job.queue, job.name) for job in topology.job_types if queue in (None, job.queue)]
    period = max(MINUTE_S, math.ceil((end - start).total_seconds() / MINUTE_S) * MINUTE_S)
    queries = [_Query(job, name, "Sum") for job in jobs for name in COUNT_NAMES]
    queries += [_Query(job, names.RETRIED, "Sum", reason) for job in jobs for reason in RETRY_REASONS]
    queries += [_Query(job, names.DEAD_LETTERED, "Sum", reason) for job in jobs for reason in DEAD_LETTER_REASONS]
    sums = _get(cloudwatch, queries, start, end, period)
    stats = {job: JobStats(queue=job[0], job_type=job[1]) for job in jobs}
    for query, value in sums.items():
        entry = stats[query.job]
        if query.reason is None:
            entry.counts[query.metric] = int(value)
        elif value:
            by_reason = entry.retried_by_reason if query.metric == names.RETRIED else entry.dead_lettered_by_reason
            by_reason[query.reason] = int(value)
    _percentiles(cloudwatch, list(stats.values()), start, end, period, raw_values)
    return list(stats.values())


def _get(cloudwatch: Any, queries: list[_Query], start: datetime, end: datetime, period: int) -> dict[_Query, float]:
    """Sum of each query's datapoints over the range; queries with no data are 0."""
    results: dict[_Query, float] = dict.fromkeys(queries, 0.0)
    by_id = {f"q{index}": query for index, query in enumerate(queries)}
    request = [
        {
            "Id": query_id,
            "MetricStat": {
                "Metric": {
                    "Namespace": METRICS_NAMESPACE,
                    "MetricName": query.metric,
                    "Dimensions": _dimensions(query),
                },
                "Period": period,
                "Stat": query.stat,
            },
        }
        for query_id, query in by_id.items()
    ]
    paginator = cloudwatch.get_paginator("get_metric_data")
    for page in paginator.paginate(MetricDataQueries=request, StartTime=start, EndTime=end):
        for result in page["MetricDataResults"]:
            results[by_id[result["Id"]]] += sum(result.get("Values", []))
    return results


def _dimensions(query: _Query) -> list[dict[str, str]]:
    dimensions = [{"Name": "queue", "Value": query.job[0]}, {"Name": "job_type", "Value": query.job[1]}]
    if query.reason is not None:
        dimensions.append({"Name": "reason", "Value": query.reason})
    return dimensions


def _percentiles(
    cloudwatch: Any, stats: list[JobStats], start: datetime, end: datetime, period: int, raw_values: Path | None
) -> None:
    """From the local runtime's raw values when ``raw_values`` is given, else from CloudWatch."""
    if raw_values is not None:
        raw = _raw_end_to_end(raw_values, start, end) if raw_values.exists() else {}
        for entry in stats:
            values = raw.get((entry.queue, entry.job_type), [])
            entry.end_to_end_ms = {f"p{p}": percentile(values, p) for p in PERCENTILES}
            entry.percentiles_from = SOURCE_RAW
        return
    queries = [_Query((s.queue, s.job_type), names.END_TO_END, f"p{p}") for s in stats for p in PERCENTILES]
    try:
        found = _get(cloudwatch, queries, start, end, period)
    except (ClientError, BotoCoreError):
        return
    for entry in stats:
        entry.end_to_end_ms = {
            f"p{p}": found[_Query((entry.queue, entry.job_type), names.END_TO_END, f"p{p}")] or None
            for p in PERCENTILES
        }
        entry.percentiles_from = SOURCE_CLOUDWATCH


def _raw_end_to_end(path: Path, start: datetime, end: datetime) -> dict[tuple[str, str], list[float]]:
    """The raw EndToEnd values in the range, per (queue, job type), read in one pass."""
    values: dict[tuple[str, str], list[float]] = {}
    for line in path.read_text().splitlines():
        record = json.loads(line)
        dimensions = record["dimensions"]
        if (
            record["name"] == names.END_TO_END
            and set(dimensions) == {"queue", "job_type"}
            and start <= datetime.fromisoformat(record["timestamp"]) < end
        ):
            values.setdefault((dimensions["queue"], dimensions["job_type"]), []).extend(record["values"])
    return values


def percentile(values: list[float], pct: int) -> float | None:
    """Nearest-rank percentile, as CloudWatch reports it."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(pct / 100 * len(ordered)))
    return ordered[rank - 1]


def render_stats(stats: list[JobStats]) -> str:
    """A table per job type, then reasons, then where the percentiles came from."""
    columns = ("QUEUE", "JOB TYPE", *(name.upper() for name in COUNT_NAMES), "P50 MS", "P95 MS", "P99 MS")
    rows = [
        (
            entry.queue,
            entry.job_type,
            *(str(entry.counts.get(name, 0)) for name in COUNT_NAMES),
            *(_ms(entry.end_to_end_ms.get(f"p{p}")) for p in PERCENTILES),
        )
        for entry in stats
    ]
    lines = [render_table(columns, rows)]
    for entry in stats:
        for label, by_reason in (
            ("retried", entry.retried_by_reason),
            ("dead-lettered", entry.dead_lettered_by_reason),
        ):
            if by_reason:
                reasons = ", ".join(f"{reason} {count}" for reason, count in sorted(by_reason.items()))
                lines.append(f"{entry.job_type} {label}: {reasons}")
    sources = sorted({entry.percentiles_from for entry in stats})
    lines.append(f"percentiles from: {'; '.join(sources)}")
    return "\n".join(lines)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"
