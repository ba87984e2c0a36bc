"""The whole suite in the order that keeps the rows apart: in-process rows first, then the local runtime's.

The destinations' limits row, then the dedupe and effect ledger row, count requests each on an
in-process moto of its own, first: they need no server, and each one's moto is gone (and its
strict-mode hooks removed) before anything else runs. The
CPU and import rows run before any embedded AWS exists, so no server or poller thread shares
the process (or its CPU time) with them. Then one embedded AWS serves, in turn: the project's
runtime idling, then running each job type's window; the throughput runs; Celery. Every request
the runtime rows make is counted by one hook installed for them all (bench.counting).
"""

import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import celery_row, dedupe_effects_row, harness_cpu, idle, imports, limits_row, profiles, throughput
from bench.counting import RequestCounter, counting
from bench.figures import Row
from bench.local import embedded_aws, running, runtime_for, worker_log
from bench.meter import Meter
from bench.results import Results, machine, versions
from bench.skipped import CannotRunError
from conveyor.local.demo import Observed
from conveyor.local.embedded import EmbeddedAws
from functions.topology import TOPOLOGY

Progress = Callable[[str], None]
# The rows in the report's order (issue 16's, then issue 17's, then issue 21's), by key and title.
ROWS = (
    (profiles.KEY, profiles.TITLE),
    (idle.KEY, idle.TITLE),
    (harness_cpu.KEY, harness_cpu.TITLE),
    (imports.KEY, imports.TITLE),
    (throughput.KEY, throughput.TITLE),
    (celery_row.KEY, celery_row.TITLE),
    (limits_row.KEY, limits_row.TITLE),
    (dedupe_effects_row.KEY, dedupe_effects_row.TITLE),
)


@dataclass(frozen=True)
class Sizes:
    jobs_per_type: int
    # Jobs of each enqueued type timed alone after its window (bench.profiles.measure).
    timed_jobs: int
    occurrences: int
    idle_s: float
    warmup_s: float
    cpu_rounds: int
    cpu_batches: int
    import_runs: int
    depths: tuple[int, ...]
    # Calls of each destination-limits scenario (jobs, for the retry budget's batches).
    limit_calls: int
    # Jobs of each dedupe-at-enqueue scenario, and jobs of one effect each run through the harness twice. The
    # counts per job do not grow with them; in-process moto slows as its queue and tables fill (1,000 jobs a
    # scenario took 8 minutes on 2 cores).
    dedupe_jobs: int
    effect_jobs: int


FULL = Sizes(
    jobs_per_type=60,
    timed_jobs=10,
    occurrences=3,
    idle_s=30.0,
    warmup_s=2.0,
    cpu_rounds=5,
    cpu_batches=20,
    import_runs=9,
    depths=(100, 1_000),
    limit_calls=1_000,
    dedupe_jobs=200,
    effect_jobs=100,
)
QUICK = Sizes(
    jobs_per_type=3,
    timed_jobs=0,
    occurrences=1,
    idle_s=2.0,
    warmup_s=0.5,
    cpu_rounds=1,
    cpu_batches=1,
    import_runs=1,
    depths=(10, 20),
    limit_calls=20,
    dedupe_jobs=20,
    effect_jobs=5,
)


class Suite:
    """The rows measured so far, by key; a row that could not run holds its reason."""

    def __init__(self, sizes: Sizes, progress: Progress) -> None:
        self._sizes = sizes
        self._progress = progress
        self.rows: dict[str, Row] = {}
        self.job_profiles: dict[str, dict[str, Any]] = {}
        self._conveyor_run: throughput.Run | None = None

    def _measure(self, key: str, what: str, measure: Callable[[], Row]) -> None:
        self._progress(f"{what}...")
        started = time.monotonic()
        try:
            self.rows[key] = measure()
        except CannotRunError as skipped:
            self._skip(key, str(skipped))
        self._progress(f"{what}: {self.rows[key].skipped or 'measured'} ({time.monotonic() - started:.0f}s)")

    def _skip(self, key: str, reason: str) -> None:
        self.rows.setdefault(key, Row.skip(key, dict(ROWS)[key], reason))

    def run(self) -> tuple[Row, ...]:
        sizes = self._sizes
        self._measure(
            limits_row.KEY,
            f"DynamoDB requests through destinations' limits, {sizes.limit_calls:,} calls a scenario",
            lambda: limits_row.measure(calls=sizes.limit_calls),
        )
        self._measure(
            dedupe_effects_row.KEY,
            f"requests of dedupe at enqueue, {sizes.dedupe_jobs:,} jobs a scenario, and of the effect ledger, "
            f"{sizes.effect_jobs:,} effects",
            lambda: dedupe_effects_row.measure(jobs=sizes.dedupe_jobs, effect_jobs=sizes.effect_jobs),
        )
        self._measure(imports.KEY, "cold import", lambda: imports.measure(runs=sizes.import_runs))
        self._measure(
            harness_cpu.KEY,
            "harness CPU",
            lambda: harness_cpu.measure(rounds=sizes.cpu_rounds, batches=sizes.cpu_batches),
        )
        with tempfile.TemporaryDirectory(prefix="conveyor-bench-") as folder:
            try:
                self._on_local_runtime(Path(folder))
            except CannotRunError as skipped:  # the embedded AWS itself could not start
                for key, _ in ROWS:
                    self._skip(key, str(skipped))
        return tuple(self.rows[key] for key, _ in ROWS)

    def _on_local_runtime(self, workdir: Path) -> None:
        sizes, depth = self._sizes, self._sizes.depths[0]
        with embedded_aws(workdir) as server:
            with counting() as counter:
                observed = Observed()
                with running(runtime_for(TOPOLOGY, server, observed), workdir) as runtime:
                    meter = Meter(runtime, observed, counter, worker_log(workdir))
                    self._measure(
                        idle.KEY,
                        f"idle requests over {sizes.idle_s:g}s",
                        lambda: idle.measure(counter, window_s=sizes.idle_s, warmup_s=sizes.warmup_s),
                    )
                    self._measure(
                        profiles.KEY, "requests per job, one job type at a time", lambda: self._profiles(meter)
                    )
                self._measure(
                    throughput.KEY,
                    f"throughput at depths {', '.join(map(str, sizes.depths))}",
                    lambda: self._throughput(server, counter, workdir),
                )
            self._measure(
                celery_row.KEY,
                f"Celery, {depth} tasks",
                lambda: celery_row.measure(server.endpoint_url, tasks=depth, conveyor=self._conveyor_run),
            )

    def _profiles(self, meter: Meter) -> Row:
        sizes = self._sizes
        row, self.job_profiles = profiles.measure(
            meter, jobs=sizes.jobs_per_type, timed=sizes.timed_jobs, occurrences=sizes.occurrences
        )
        return row

    def _throughput(self, server: EmbeddedAws, counter: RequestCounter, workdir: Path) -> Row:
        row, runs = throughput.measure(server, counter, workdir, depths=self._sizes.depths)
        self._conveyor_run = runs[self._sizes.depths[0]][throughput.CONVEYOR]
        return row


def run(sizes: Sizes, *, command: str, progress: Progress) -> Results:
    began, started = datetime.now(UTC), time.monotonic()
    rows = (suite := Suite(sizes, progress)).run()
    return Results(
        measured_at=began,
        command=command,
        quick=sizes is QUICK,
        seconds=time.monotonic() - started,
        rows=rows,
        job_profiles=suite.job_profiles,
        machine=machine(),
        versions=versions(),
    )
