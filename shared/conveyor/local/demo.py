"""`conveyor local demo`: run a scenario end to end on the local runtime, watch it, check it, report.

The engine is generic: a scenario (the project's, `scenarios/demo.py`) enqueues work and says
what must come of it; the engine runs the platform, shows live progress, and checks the
scenario's invariants against what actually happened (outcomes, DLQ contents, effects).
"""

import json
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager, redirect_stdout
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Protocol, TextIO

from rich.console import Console
from rich.live import Live
from rich.text import Text

from conveyor.contract import message_attributes as attrs
from conveyor.contract.schedules import Schedule
from conveyor.contract.timestamps import utc_text
from conveyor.local.provision import Provisioned
from conveyor.local.runtime import LocalRuntime, worker_log_handlers
from conveyor.local.strict import refused
from conveyor.ops.stats import JobStats, percentile, read_stats, render_stats
from conveyor.ops.status import queue_counts
from conveyor.worker.metrics import COUNTS
from conveyor.worker.outcomes import JobOutcome, Kind
from conveyor.worker.relay import RELAY_SOURCE, SEQUENCE_NUMBER
from conveyor.worker.schedule_runs import RunRecord, ScheduleRuns, ScheduleState

# The scenario must settle (queues empty, nothing in flight) within this long: a guard against a
# hang, not a speed target. The example scenario settles in about 90s on 2 cores with one of them
# busy elsewhere; the guard leaves it twice that.
SETTLE_TIMEOUT_S = 180.0
# Read metrics a little beyond the run on both sides: EMF timestamps come from the workers' clocks.
STATS_MARGIN = timedelta(minutes=1)
REFRESH_S = 0.5
DRAIN_GRACE_S = 5.0
# Without a terminal, print progress this often instead of redrawing it.
PLAIN_PROGRESS_EVERY_S = 5.0
PERCENTILES = (50, 95, 99)
# Lambda's on-failure records carry no reason attribute: their condition, with this prefix, stands in.
ON_FAILURE_PREFIX = "on-failure: "
UNREADABLE_RELAY_DEAD_LETTER = "<unreadable>"
RELAY_BODY_PREVIEW_CHARS = 200
# What each count of the progress table means, printed once above it.
LEGEND = (
    "DEPTH      messages waiting in the queue: new, and retries waiting out their backoff",
    "IN FLIGHT  received by a worker, not yet deleted",
    "DONE       jobs finished: succeeded, or a duplicate that idempotency absorbed (no second effect)",
    "RETRIED    failed attempts sent back with backoff: a job retried three times counts three",
    "DEAD       jobs the harness dead-lettered with a reason, poison messages included: the same",
    "           entries as 'DLQ entries by reason' below. Stream records the relays could not turn",
    "           into jobs never reach a queue: they are the relay DLQ's, reported on their own.",
    "DISCARDED  jobs their handler ended on purpose (raise Discard(reason)): final, not failed",
)
# What to try once the demo has shown the platform working.
NEXT_STEPS = (
    ("conveyor local up", "the platform, left running: it prints the exports for a second shell"),
    ("conveyor enqueue TYPE --data JSON", "from that shell: one job (`conveyor topology` lists the types)"),
    ("conveyor status", "backlog, in flight, oldest age and DLQ depth of every queue"),
)


@dataclass(frozen=True)
class Invariant:
    """One claim the demo checks against what happened, with what was found."""

    claim: str
    held: bool
    found: str


class Scenario(Protocol):
    """What the demo runs: ``produce`` enqueues work; ``check`` tests its invariants."""

    def produce(self, runtime: LocalRuntime) -> None: ...

    def check(self, observed: "Observed") -> list[Invariant]: ...


@dataclass
class Observed:
    """Everything the demo saw: outcomes reported by the harness and what is left in the DLQs."""

    outcomes: list[JobOutcome] = field(default_factory=list)
    dead_letters: list[dict[str, Any]] = field(default_factory=list)
    # What the stream relays left in the relay DLQ: their own poison records and Lambda's on-failure records.
    relay_dead_letters: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def record(self, outcome: JobOutcome) -> None:
        with self.lock:
            self.outcomes.append(outcome)

    def final_kind_by_job(self) -> dict[str, Kind]:
        """The last terminal outcome of each job id (a retried job ends succeeded, discarded or dead-lettered)."""
        terminal = {Kind.SUCCEEDED, Kind.DUPLICATE, Kind.DEAD_LETTERED, Kind.DISCARDED}
        return {o.job_id: o.kind for o in self.outcomes if o.job_id and o.kind in terminal}

    def dead_letter_reasons(self) -> Counter[str]:
        return Counter(_attribute(message, attrs.REASON) or "<none>" for message in self.dead_letters)

    def relay_dead_letter_reasons(self) -> Counter[str]:
        return Counter(relay_dead_letter(message).reason for message in self.relay_dead_letters)


def _attribute(message: dict[str, Any], name: str) -> str | None:
    value = message.get("MessageAttributes", {}).get(name)
    return value["StringValue"] if value else None


@dataclass(frozen=True)
class RelayDeadLetter:
    """One relay DLQ message in brief: why it is there and which stream records it stands for."""

    reason: str
    detail: str


def relay_dead_letter(message: dict[str, Any]) -> RelayDeadLetter:
    """The relay's own poison record (the whole record, a reason attribute) or Lambda's on-failure record (metadata)."""
    reason = _attribute(message, attrs.REASON)
    if reason is not None:
        where = f"{_attribute(message, RELAY_SOURCE)} stream, sequence number {_attribute(message, SEQUENCE_NUMBER)}"
        return RelayDeadLetter(reason, f"{where}: {_attribute(message, attrs.ERROR)}")
    try:
        document = json.loads(message["Body"])
        condition, batch = document["requestContext"]["condition"], document["DDBStreamBatchInfo"]
        records = f"sequence numbers {batch['startSequenceNumber']} to {batch['endSequenceNumber']}"
    except (ValueError, KeyError, TypeError):
        return RelayDeadLetter(UNREADABLE_RELAY_DEAD_LETTER, message["Body"][:RELAY_BODY_PREVIEW_CHARS])
    return RelayDeadLetter(
        ON_FAILURE_PREFIX + condition, f"{batch['batchSize']} records of shard {batch['shardId']}, {records}"
    )


@dataclass(frozen=True)
class QueueDepth:
    visible: int
    in_flight: int
    delayed: int

    @property
    def total(self) -> int:
        return self.visible + self.in_flight + self.delayed


def queue_depth(sqs: Any, url: str) -> QueueDepth:
    return QueueDepth(**queue_counts(sqs, url))


def read_dead_letters(sqs: Any, provisioned: Provisioned) -> list[dict[str, Any]]:
    """Every job DLQ message, left in place."""
    return [message for queue in provisioned.queues.values() for message in _peek_all(sqs, queue.dlq_url)]


def _peek_all(sqs: Any, url: str) -> list[dict[str, Any]]:
    """Every message on ``url``, left in place: each is received once, then made visible again."""
    received: dict[str, dict[str, Any]] = {}
    while batch := sqs.receive_message(
        QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=60, MessageAttributeNames=["All"]
    ).get("Messages", []):
        received.update((message["MessageId"], message) for message in batch)
    for message in received.values():
        sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"], VisibilityTimeout=0)
    return list(received.values())


@dataclass(frozen=True)
class ScheduleHistory:
    """One schedule's run audit, read back for the report."""

    schedule: Schedule
    state: ScheduleState | None
    runs: list[RunRecord]


def read_schedule_histories(runtime: LocalRuntime) -> list[ScheduleHistory]:
    audit = ScheduleRuns(runtime.dynamodb, runtime.provisioned.schedule_runs_table, clock=lambda: datetime.now(UTC))
    return [ScheduleHistory(s, audit.state(s.name), audit.runs(s.name)) for s in runtime.topology.schedules]


def _moment(moment: datetime | None) -> str:
    return utc_text(moment, timespec="seconds") if moment else "-"


def schedule_lines(history: ScheduleHistory) -> list[str]:
    """A schedule's state, then its occurrences, consecutive ones that ended alike on one line."""
    schedule, state = history.schedule, history.state
    policy = "skip" if schedule.missed.kind == "skip" else f"catch_up({schedule.missed.max_runs})"
    shards = f", {schedule.shards} shards" if schedule.shards > 1 else ""
    lines = [f"  {schedule.name}: {schedule.expression} in {schedule.timezone}{shards}, missed runs: {policy}"]
    if state:
        lines.append(
            f"    last scheduled {_moment(state.last_scheduled)} ({state.last_status or '-'}), "
            f"last success {_moment(state.last_success)}, next expected {_moment(state.next_expected)}"
        )
    by_time: dict[datetime, Counter[str]] = defaultdict(Counter)
    for run in history.runs:
        by_time[run.occurrence.scheduled_time][run.status.value + (f" ({run.reason})" if run.reason else "")] += 1
    groups: list[tuple[str, list[datetime]]] = []
    for moment, ended in sorted(by_time.items()):
        label = ", ".join(f"{count} shards {how}" if schedule.shards > 1 else how for how, count in ended.items())
        if groups and groups[-1][0] == label:
            groups[-1][1].append(moment)
        else:
            groups.append((label, [moment]))
    for label, moments in groups:
        span = _moment(moments[0]) + (f" .. {_moment(moments[-1])}" if len(moments) > 1 else "")
        lines.append(f"    {span:<44} {len(moments):>2} x {label}")
    return lines


class Progress:
    """Per queue: depth, in flight, done, retried and dead-lettered, redrawn in place on a terminal (rich's Live)."""

    def __init__(self, runtime: LocalRuntime, observed: Observed, out: TextIO) -> None:
        self._runtime = runtime
        self._observed = observed
        self._out = out
        # The workers' output is already in their log file: Live must not take over sys.stdout.
        self._live = Live(console=Console(file=out), auto_refresh=False, redirect_stdout=False, redirect_stderr=False)
        self._last_plain = 0.0

    def show(self, elapsed: float, *, final: bool = False) -> None:
        lines = self._lines(elapsed)
        if self._live.console.is_terminal:
            if not self._live.is_started:
                self._live.start()
            self._live.update(Text("\n".join(lines)), refresh=True)
            if final:
                self.stop()
        elif final or time.monotonic() - self._last_plain >= PLAIN_PROGRESS_EVERY_S:
            self._out.write("\n".join(lines) + "\n")
            self._last_plain = time.monotonic()
        self._out.flush()

    def stop(self) -> None:
        """Leave the terminal as it was (the cursor shown again), however the run ended."""
        self._live.stop()

    def _lines(self, elapsed: float) -> list[str]:
        with self._observed.lock:
            counts = Counter((o.queue, o.kind) for o in self._observed.outcomes)
        header = (
            f"{'QUEUE':<10} {'DEPTH':>6} {'IN FLIGHT':>9} {'DONE':>6} {'RETRIED':>8} {'DEAD':>6} {'DISCARDED':>9}"
            f"   t={elapsed:5.1f}s"
        )
        lines = [header]
        for name, queue in self._runtime.provisioned.queues.items():
            depth = queue_depth(self._runtime.sqs, queue.url)
            done = counts[(name, Kind.SUCCEEDED)] + counts[(name, Kind.DUPLICATE)]
            lines.append(
                f"{name:<10} {depth.visible + depth.delayed:>6} {depth.in_flight:>9} {done:>6} "
                f"{counts[(name, Kind.RETRIED)]:>8} {counts[(name, Kind.DEAD_LETTERED)]:>6} "
                f"{counts[(name, Kind.DISCARDED)]:>9}"
            )
        return lines


def settled(runtime: LocalRuntime) -> bool:
    idle = all(poller.stats.in_flight == 0 for poller in runtime.pollers.values())
    return idle and all(queue_depth(runtime.sqs, q.url).total == 0 for q in runtime.provisioned.queues.values())


@contextmanager
def worker_logs_to(path: Path) -> Iterator[None]:
    """Send the workers' output (JSON logs, EMF metric lines) to a file; the terminal shows progress."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handlers = worker_log_handlers()
    with path.open("w") as log_file, redirect_stdout(log_file):
        previous = [handler.setStream(log_file) for handler in handlers]
        try:
            yield
        finally:
            for handler, stream in zip(handlers, previous, strict=True):
                handler.setStream(stream)


def report(
    observed: Observed,
    stats: list[JobStats],
    invariants: list[Invariant],
    out: TextIO,
    schedules: list[ScheduleHistory],
) -> None:
    by_type: dict[str, Counter[Kind]] = defaultdict(Counter)
    retries: Counter[str] = Counter()
    latencies: list[float] = []
    # Scheduled runs fired on the emulator's moved clock are created ahead of the workers' clock.
    ahead = 0
    for outcome in observed.outcomes:
        by_type[outcome.job_type or "<unreadable>"][outcome.kind] += 1
        if outcome.kind is Kind.RETRIED:
            retries[f"{outcome.job_type}: {outcome.reason} ({outcome.error_class})"] += 1
        if outcome.kind is Kind.SUCCEEDED and outcome.created_at:
            if outcome.created_at > outcome.finished_at:
                ahead += 1
            else:
                latencies.append((outcome.finished_at - outcome.created_at).total_seconds())
    kinds = list(Kind)
    out.write("\nOutcomes by job type (one line per run; a retried job counts once per attempt)\n")
    out.write(f"  {'JOB TYPE':<22}" + "".join(f"{kind.value:>14}" for kind in kinds) + "\n")
    for job_type, counts in sorted(by_type.items()):
        out.write(f"  {job_type:<22}" + "".join(f"{counts[kind]:>14}" for kind in kinds) + "\n")
    out.write("\nRetries by reason\n")
    for reason, count in retries.most_common():
        out.write(f"  {count:>5}  {reason}\n")
    out.write("\nDLQ entries by reason\n")
    for reason, count in observed.dead_letter_reasons().most_common():
        out.write(f"  {count:>5}  {reason}\n")
    out.write("\nRelay DLQ entries (stream records the relays could not turn into jobs)\n")
    for letter in map(relay_dead_letter, observed.relay_dead_letters):
        out.write(f"  {letter.reason}  {letter.detail}\n")
    if schedules:
        out.write("\nSchedule runs (the run audit, read from its table; times in UTC)\n")
        for history in schedules:
            out.write("".join(f"{line}\n" for line in schedule_lines(history)))
    if latencies:
        points = ", ".join(f"p{pct} {percentile(latencies, pct) or 0:.2f}s" for pct in PERCENTILES)
        left_out = f" ({ahead} scheduled runs created on the emulator's clock left out)" if ahead else ""
        out.write(f"\nEnqueue to done: {points} over {len(latencies)} jobs{left_out}\n")
    out.write("\n`conveyor stats` for this run (the harness's EMF metrics, read back from the embedded CloudWatch)\n")
    out.write(render_stats(stats) + "\n")
    out.write("\nInvariants\n")
    for invariant in invariants:
        out.write(f"  {'held  ' if invariant.held else 'FAILED'}  {invariant.claim}: {invariant.found}\n")


class _Producer(threading.Thread):
    """Runs the scenario's ``produce`` beside the progress view; its failure is re-raised after."""

    def __init__(self, scenario: Scenario, runtime: LocalRuntime) -> None:
        super().__init__(name="demo-producer", daemon=True)
        self._scenario = scenario
        self._runtime = runtime
        self._failure: BaseException | None = None

    def run(self) -> None:
        try:
            self._scenario.produce(self._runtime)
        except BaseException as error:  # handed to the main thread by raise_failure
            self._failure = error

    def raise_failure(self) -> None:
        self.join()
        if self._failure is not None:
            raise self._failure


def stats_match(observed: Observed, stats: list[JobStats]) -> Invariant:
    """What the metrics say happened equals what the harness reported, per job type and outcome."""
    seen = Counter((o.queue, o.job_type, COUNTS[o.kind]) for o in observed.outcomes)
    wrong = [
        f"{entry.job_type} {name}: metrics {count}, outcomes {seen[(entry.queue, entry.job_type, name)]}"
        for entry in stats
        for name, count in entry.counts.items()
        if count != seen[(entry.queue, entry.job_type, name)]
    ]
    return Invariant(
        "`conveyor stats` reads back the same counts the demo observed",
        not wrong,
        "; ".join(wrong[:3]) or f"{sum(sum(e.counts.values()) for e in stats)} outcomes, per job type and kind",
    )


def _nothing_refused(refusals: list[str]) -> Invariant:
    """Strict mode refused no request: each would have failed on AWS (docs/local.md)."""
    return Invariant(
        "no request AWS would refuse (strict mode refused none)",
        not refusals,
        "; ".join(refusals[:3]) or "0 refused",
    )


def run_demo(
    runtime_factory: Callable[[Observed], LocalRuntime],
    scenario: Scenario,
    *,
    log_path: Path,
    raw_values: Path,
    out: TextIO | None = None,
) -> bool:
    """Run ``scenario`` on a fresh runtime; True if every invariant held. ``out`` defaults to stdout at the call."""
    out = out or sys.stdout
    observed = Observed()
    runtime = runtime_factory(observed)
    began = datetime.now(UTC)
    refused_before = len(refused())
    out.write("".join(f"  {line}\n" for line in LEGEND) + "\n")
    with worker_logs_to(log_path):
        runtime.start(raw_values=raw_values)
        started = time.monotonic()
        producer = _Producer(scenario, runtime)
        progress = Progress(runtime, observed, out)
        try:
            producer.start()
            while (producer.is_alive() or not settled(runtime)) and time.monotonic() - started < SETTLE_TIMEOUT_S:
                progress.show(time.monotonic() - started)
                time.sleep(REFRESH_S)
            progress.show(time.monotonic() - started, final=True)
            producer.raise_failure()
        finally:
            progress.stop()
            runtime.drain(grace_s=DRAIN_GRACE_S)
    observed.dead_letters = read_dead_letters(runtime.sqs, runtime.provisioned)
    observed.relay_dead_letters = _peek_all(runtime.sqs, runtime.provisioned.relay_dlq_url)
    drained = settled(runtime)
    stats = read_stats(
        runtime.cloudwatch,
        runtime.topology,
        start=began - STATS_MARGIN,
        end=datetime.now(UTC) + STATS_MARGIN,
        raw_values=raw_values,
    )
    invariants = [
        Invariant(
            f"queues empty within {SETTLE_TIMEOUT_S:.0f}s",
            drained,
            "nothing visible, delayed or in flight" if drained else "work was left",
        ),
        *scenario.check(observed),
        stats_match(observed, stats),
        _nothing_refused(refused()[refused_before:]),
    ]
    report(observed, stats, invariants, out, read_schedule_histories(runtime))
    out.write(f"\nWorker logs: {log_path}\n")
    out.write("\nTry next, with the venv active (`. .venv/bin/activate`):\n")
    out.write("".join(f"  {command:<36} {what}\n" for command, what in NEXT_STEPS))
    return all(invariant.held for invariant in invariants)
