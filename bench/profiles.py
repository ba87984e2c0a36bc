"""Row 1 and the job profiles: requests per job by service and operation, against the SQS floor.

Each example job type of the project's topology runs in a window of its own on the local runtime:
a producer enqueues its jobs through the SDK in batches of ten (the demo scenario's builders make
valid payloads), or, for a scheduled job type, the scheduler emulator fires its schedule's
consecutive occurrences one at a time, as EventBridge Scheduler would; the window ends once the
queue's poller has deleted them all.

What a window counts as its jobs' requests: every SQS request on the job's queue and its DLQ
(the producer's sends, the event source mapping's receives, empty ones included, and deletes,
the harness's own), and every DynamoDB request except on the event source state table (which
stands in for Lambda's own mapping state, not a request in AWS). Left out: what a process asks
once (a queue's URL, the runtime's provisioning); CloudWatch, where the local runtime puts what CloudWatch Logs
extracts from EMF in AWS (the profile carries EMF as log bytes and metric values instead); the
stream mappings' polling and the other queues' pollers, which no job of the window touches (the
idle row measures them).

The SQS floor is what a job needs at the least: its share of the producer's send (1/10 of a
SendMessageBatch, or a whole SendMessage for a schedule's, which Scheduler sends one by one), 1/10
of a ReceiveMessage and 1/10 of a DeleteMessageBatch: 0.3 for a job enqueued in batches of ten.
"""

import statistics
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

from bench.counting import Call, per_job, resource_of
from bench.figures import TIMES, Figure, Row, Table, Target
from bench.meter import Meter, Window, metric_values
from bench.skipped import CannotRunError
from chaos.faults import DYNAMODB_DATA_OPERATIONS
from conveyor.contract import limits
from conveyor.contract.cron import next_occurrence
from conveyor.contract.schedules import Schedule
from conveyor.contract.topology import Topology
from conveyor.local.scheduler import LocalScheduler, ScheduleClock
from conveyor.sdk.client import JobClient
from conveyor.sdk.prepare import JobRequest
from conveyor.worker.outcomes import Kind
from functions.jobs.generate_report import GenerateReport, generate_report
from scenarios.demo import EXAMPLES, Example

KEY = "requests_per_job"
TITLE = "Requests per job by service and operation, on the local runtime, against the SQS floor"
TARGET = Target(1.05)
SDK_BATCH = limits.SQS_MAX_BATCH_ENTRIES
SCHEDULER_BATCH = 1
# Rows of each report job: one chunk, three effects (as the chaos run's reports).
REPORT_ROWS = 3
# Past an occurrence and its flexible window, so that every shard of it is due.
FIRE_MARGIN = timedelta(minutes=1)
MILLISECONDS = 1000.0
PER_JOB_FORMAT = "{:.3f}"

# What a process asks SQS once (a queue's URL, created or looked up): not a job's request.
SQS_SETUP_OPERATIONS = frozenset({"CreateQueue", "GetQueueAttributes", "GetQueueUrl"})

RequestBuilder = Callable[[int], JobRequest]


def sqs_floor(producer_batch: int) -> float:
    """SQS requests per job at the least: the producer's send, a receive and a delete each shared by ten jobs."""
    return 1 / producer_batch + 2 / limits.SQS_MAX_BATCH_ENTRIES


def _example_request(example: Example, n: int) -> JobRequest:
    request, _ = example.job(n, f"bench-{example.subject(n)}")
    return request


def _report_request(n: int) -> JobRequest:
    return JobRequest(generate_report, GenerateReport(report_id=f"bench-r-{n:05d}", rows=REPORT_ROWS))


def request_builders() -> dict[str, RequestBuilder]:
    """A valid request for the n-th job of each example job type a producer enqueues, by job type name."""
    builders: dict[str, RequestBuilder] = {generate_report.name: _report_request}
    for example in EXAMPLES:
        job = _example_request(example, 0).job
        builders[job if isinstance(job, str) else job.name] = partial(_example_request, example)
    return builders


def attributable(queue_urls: tuple[str, ...], state_table: str) -> Callable[[Call], bool]:
    """Whether a counted request belongs to the jobs of a window on a queue (its URL and its DLQ's).

    Data requests only: not the lookups and creations a process makes once (a queue's URL, the
    runtime's provisioning at start-up).
    """
    queues = frozenset(resource_of({"QueueUrl": url}) for url in queue_urls)

    def keep(call: Call) -> bool:
        if call.service == "sqs":
            return call.resource in queues and call.operation not in SQS_SETUP_OPERATIONS
        data = call.operation in DYNAMODB_DATA_OPERATIONS
        return call.service == "dynamodb" and data and state_table not in call.resource.split(",")

    return keep


def sqs_per_job(requests: Mapping[str, float]) -> float:
    return sum(count for name, count in requests.items() if name.startswith("sqs."))


def durations_ms(window: Window) -> list[float]:
    """How long each job of the window ran in the harness; every one must have succeeded."""
    ran = [o for o in window.outcomes if o.job_type == window.job_type and o.kind is Kind.SUCCEEDED]
    if len(ran) != window.jobs or not ran:
        kinds = sorted({o.kind.value for o in window.outcomes if o.job_type == window.job_type})
        raise CannotRunError(f"{window.job_type}: {len(ran)} of {window.jobs} jobs succeeded (outcomes seen: {kinds})")
    return [(o.finished_at - o.started_at).total_seconds() * MILLISECONDS for o in ran if o.started_at]


def job_profile(window: Window, keep: Callable[[Call], bool], timed: Window | None = None) -> dict[str, Any]:
    """The profile `conveyor cost` reads for one job type, its durations from ``timed`` if given."""
    durations = durations_ms(window)  # which also checks that every job of the window succeeded
    if timed is not None:
        durations = durations_ms(timed)
    return {
        "queue": window.queue,
        "requests_per_job": per_job(window.counts, window.jobs, keep),
        "invocations_per_job": window.invocations / window.jobs,
        "duration_ms_per_job": statistics.fmean(durations),
        "log_bytes_per_job": len(window.output.encode()) / window.jobs,
        "metric_values_per_job": metric_values(window.output) / window.jobs,
    }


class ProfileRun:
    """The windows of one runtime, one job type at a time."""

    def __init__(self, meter: Meter) -> None:
        self._meter = meter
        self._runtime = meter.runtime
        self._client = JobClient(
            self._runtime.topology, sqs_client=self._runtime.sqs, dynamodb_client=self._runtime.dynamodb
        )

    def enqueued(self, job_type: str, queue: str, requests: list[JobRequest]) -> Window:
        mark = self._meter.mark(queue)
        ids = self._client.enqueue_many(requests)
        self._meter.wait(mark, len(ids), f"{len(ids)} {job_type} jobs")
        return self._meter.close(mark, job_type, len(ids))

    def scheduled(self, schedule: Schedule, queue: str, occurrences: int) -> Window:
        """``occurrences`` consecutive occurrences of ``schedule``, each fired once the last one's jobs are done."""
        clock = ScheduleClock(datetime.now(UTC))
        only = replace(self._runtime.topology, schedules=(schedule,))
        scheduler = LocalScheduler(only, sqs=self._runtime.sqs, queues=self._runtime.provisioned.queues, clock=clock)
        margin = (schedule.flexible_window or timedelta(0)) + FIRE_MARGIN
        mark = self._meter.mark(queue)
        jobs = 0
        for _ in range(occurrences):
            due = next_occurrence(schedule, clock())
            if due is None:
                break
            clock.set(due + margin)
            jobs += len(scheduler.tick())
            self._meter.wait(mark, jobs, f"{schedule.name} occurrences")
        return self._meter.close(mark, schedule.job, jobs)


def measure(meter: Meter, *, jobs: int, timed: int, occurrences: int) -> tuple[Row, dict[str, Any]]:
    """Row 1 and the job profiles, from one window per job type of the runtime's topology.

    After an enqueued job type's window, ``timed`` more jobs of it (one batch) run alone, and the
    profile's duration is theirs: in the window, up to a queue's whole concurrency of invocations
    share the process (and its GIL, with the embedded AWS), which stretches each job's wall time by
    as much; in Lambda, each invocation has a process of its own. With none, durations are the window's.
    """
    runtime = meter.runtime
    topology: Topology = runtime.topology
    runtime.scheduler.clock.freeze()  # the wall clock fires nothing while the windows run
    run = ProfileRun(meter)
    builders = request_builders()
    schedules = {schedule.job: schedule for schedule in topology.schedules}
    windows: list[Window] = []
    alone: dict[str, Window] = {}
    notes: list[str] = []
    for job_type in topology.job_types:
        name, queue = job_type.name, job_type.queue
        if name in schedules:
            windows.append(run.scheduled(schedules[name], queue, occurrences))
        elif name in builders:
            windows.append(run.enqueued(name, queue, [builders[name](n) for n in range(jobs)]))
            if timed:
                alone[name] = run.enqueued(name, queue, [builders[name](jobs + n) for n in range(timed)])
        else:
            notes.append(f"{name}: no payload builder in bench/profiles.py, not measured.")
    provisioned = runtime.provisioned
    profiles = {}
    for window in windows:
        urls = provisioned.queues[window.queue]
        keep = attributable((urls.url, urls.dlq_url), provisioned.event_sources_table)
        profiles[window.job_type] = job_profile(window, keep, alone.get(window.job_type))
    if alone:
        notes.append(
            f"Handler ms/job: the harness's wall time per job (idempotency, the job and its effects, on the local "
            f"runtime), of {timed} more jobs of each enqueued type run alone in one invocation after its window; "
            "scheduled types' from their window, whose occurrences run one at a time."
        )
    return _row(windows, profiles, schedules, notes, provisioned.event_sources_table), profiles


def _row(
    windows: list[Window],
    profiles: dict[str, dict[str, Any]],
    schedules: Mapping[str, Schedule],
    notes: list[str],
    state_table: str,
) -> Row:
    enqueued = [w for w in windows if w.job_type not in schedules]
    figures = []
    if enqueued:
        jobs = sum(w.jobs for w in enqueued)
        sqs = sum(sqs_per_job(profiles[w.job_type]["requests_per_job"]) * w.jobs for w in enqueued)
        figures.append(
            Figure(
                name=f"SQS requests per successful job, the {len(enqueued)} SDK-enqueued job types, in bursts of "
                f"{jobs // len(enqueued)} ({jobs} jobs)",
                value=sqs / jobs,
                unit="req/job",
                anchor=sqs_floor(SDK_BATCH),
                anchor_label="floor: SendMessageBatch + ReceiveMessage + DeleteMessageBatch, 10 jobs each",
            )
        )
    return Row(
        KEY,
        TITLE,
        tuple(figures),
        (_by_type(windows, profiles, schedules), _by_operation(windows, profiles), _profile_table(profiles)),
        (
            "Floor: 1/10 SendMessageBatch + 1/10 ReceiveMessage + 1/10 DeleteMessageBatch = 0.3 per job enqueued "
            "in batches of ten; a scheduled job's send is a whole SendMessage (Scheduler sends one per target), "
            "so its floor is 1.2.",
            "A burst pays a few receives beyond the floor whatever its size: the listener's long poll that "
            "finds its first messages, and the short receives that find the queue drained. The issue's target "
            "is held against a sustained backlog, in the throughput row (depth 1,000).",
            "Counted per window by a botocore hook on every client of the runtime: SQS on the job's queue and DLQ "
            "(empty receives included), DynamoDB on every table but the local event source state "
            f"({state_table}). Not counted: the producer's cached GetQueueUrl, CloudWatch (the local stand-in for "
            "EMF extraction; EMF is in the profile as log bytes and metric values), stream polling and other "
            "queues' idle polling (see the idle row).",
            *notes,
        ),
        data={
            "windows": {
                w.job_type: {
                    "queue": w.queue,
                    "jobs": w.jobs,
                    "invocations": w.invocations,
                    "requests": {f"{call.name} {call.resource}".strip(): n for call, n in sorted(w.counts.items())},
                }
                for w in windows
            }
        },
    )


def _by_type(
    windows: list[Window], profiles: Mapping[str, Mapping[str, Any]], schedules: Mapping[str, Schedule]
) -> Table:
    """Each job type's SQS requests per job against its floor (a scheduled job's send is a whole request)."""
    rows = []
    for window in windows:
        scheduled = window.job_type in schedules
        value = sqs_per_job(profiles[window.job_type]["requests_per_job"])
        floor = sqs_floor(SCHEDULER_BATCH if scheduled else SDK_BATCH)
        rows.append(
            (
                window.job_type,
                f"{window.jobs}" + (", fired by the scheduler" if scheduled else ""),
                PER_JOB_FORMAT.format(value),
                PER_JOB_FORMAT.format(floor),
                f"{value / floor:.2f}{TIMES}",
            )
        )
    return Table(
        "SQS requests per job by job type, against its floor",
        ("job type", "jobs", "SQS req/job", "floor", "ratio"),
        tuple(rows),
    )


def _by_operation(windows: list[Window], profiles: Mapping[str, Mapping[str, Any]]) -> Table:
    names = sorted({name for p in profiles.values() for name in p["requests_per_job"]})
    types = [w.job_type for w in windows]
    rows = [
        (name, *(PER_JOB_FORMAT.format(profiles[t]["requests_per_job"].get(name, 0.0)) for t in types))
        for name in names
    ]
    totals = ("all", *(PER_JOB_FORMAT.format(sum(profiles[t]["requests_per_job"].values())) for t in types))
    return Table("Requests per successful job, by service.operation", ("request", *types), (*rows, totals))


def _profile_table(profiles: Mapping[str, Mapping[str, Any]]) -> Table:
    return Table(
        "Job profiles (bench/results.json `job_profiles`, read by `conveyor cost`)",
        ("job type", "queue", "invocations/job", "handler ms/job", "log bytes/job", "metric values/job"),
        tuple(
            (
                name,
                p["queue"],
                f"{p['invocations_per_job']:.3f}",
                f"{p['duration_ms_per_job']:.1f}",
                f"{p['log_bytes_per_job']:.0f}",
                f"{p['metric_values_per_job']:.1f}",
            )
            for name, p in profiles.items()
        ),
    )
