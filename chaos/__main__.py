"""`python -m chaos` (`make chaos`): run the platform under faults, check it, write docs/reliability.md.

Bad arguments (a negative or absurd ``--jobs``, an unknown fault, a rate outside [0, 1]) end
with one line and exit status 2 before anything starts. A failing run prints the seed and the
first broken invariant, and exits 1.
"""

import argparse
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from chaos.corpus import load as load_corpus
from chaos.faults import FaultMix, read_events, window_faults_by_key
from chaos.invariants import check
from chaos.report import render
from chaos.run import MIN_KILLS, RunSettings, Supervisor
from conveyor.local.embedded import EmbeddedAws, free_port

MAX_JOBS = 100_000
DEFAULT_JOBS = 10_000
QUICK_JOBS = 1_000
DEFAULT_REDELIVERY = 0.02
REPORT = Path("docs/reliability.md")
WORKDIR = Path(".cache/chaos")
# Per-call rates for 10,000 jobs: each fault lands some dozens of times, not thousands, so the
# run measures recovery rather than only restarts. Quick mode raises them to land on 1,000 jobs.
DEFAULT_RATES = {
    "crash_before_effect": 0.0004,
    "crash_after_effect": 0.0004,
    "crash_after_save": 0.0004,
    "crash_before_delete": 0.001,
    "throttle_dynamodb": 0.002,
    "transaction_conflict": 0.05,
    "send_batch_partial": 0.02,
    "dlq_send_failure": 0.01,
    "relay_crash_before_send": 0.002,
    "relay_crash_after_send": 0.002,
}
QUICK_FACTOR = 5


def _jobs(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if not 1 <= value <= MAX_JOBS:
        raise argparse.ArgumentTypeError(f"must be between 1 and {MAX_JOBS}, got {value}")
    return value


class _OneLineParser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # argparse's own is usage + message; keep the message
        self.exit(2, f"chaos: {message}\n")


def parse(argv: Sequence[str]) -> tuple[argparse.Namespace, FaultMix]:
    parser = _OneLineParser(prog="make chaos", description=__doc__)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--jobs", type=_jobs, default=None, help=f"jobs to run (default {DEFAULT_JOBS}; 1..{MAX_JOBS})")
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_JOBS} jobs, faults x{QUICK_FACTOR}")
    parser.add_argument("--fault", action="append", default=[], metavar="NAME=RATE", help="override one fault's rate")
    parser.add_argument("--kills", type=int, default=MIN_KILLS, help=f"SIGKILLs of the workers (at least {MIN_KILLS})")
    parser.add_argument("--report", type=Path, default=REPORT, help="where to write the report ('-' for none)")
    options = parser.parse_args(argv)
    if options.kills < MIN_KILLS:
        parser.error(f"--kills must be at least {MIN_KILLS}, got {options.kills}")
    factor = QUICK_FACTOR if options.quick else 1
    defaults = {name: min(1.0, rate * factor) for name, rate in DEFAULT_RATES.items()}
    try:
        mix = FaultMix.parse(options.fault, defaults)
    except ValueError as error:
        parser.error(str(error))
    options.jobs = options.jobs or (QUICK_JOBS if options.quick else DEFAULT_JOBS)
    return options, mix


def leftover_processes(endpoint: str) -> list[str]:
    """Chaos children still running against this run's endpoint."""
    pattern = f"chaos.child --endpoint {endpoint}"
    found = subprocess.run(["pgrep", "-af", pattern], capture_output=True, text=True, check=False)  # noqa: S603, S607
    return [line for line in found.stdout.splitlines() if line.strip()]


def main(argv: Sequence[str] | None = None) -> int:
    options, mix = parse(sys.argv[1:] if argv is None else argv)
    workdir = WORKDIR / str(options.seed)
    shutil.rmtree(workdir, ignore_errors=True)  # a seed's last run: its children's logs, events and windows
    workdir.mkdir(parents=True)
    events = workdir / "faults.jsonl"
    settings = RunSettings(
        seed=options.seed,
        jobs=options.jobs,
        faults=mix,
        redelivery_rate=DEFAULT_REDELIVERY,
        kills=options.kills,
        workdir=workdir,
        corpus=tuple(entry for entry in load_corpus().entries if entry.expected_refusal is None),
    )
    print(f"chaos: seed {options.seed}, {options.jobs} jobs, workdir {workdir}", flush=True)  # noqa: T201
    supervisor = Supervisor(settings, progress=lambda line: print(f"chaos: {line}", flush=True))  # noqa: T201
    server = EmbeddedAws(free_port(), strict=True)
    server.start()
    try:
        runtime = supervisor.run(server)
        record = supervisor.record
        findings = check(
            record,
            sqs=runtime.sqs,
            dynamodb=runtime.dynamodb,
            window_faults=window_faults_by_key(events),
            leftover_processes=leftover_processes(record.endpoint),
        )
    finally:
        server.stop()
    command = " ".join(["python -m chaos", *(sys.argv[1:] if argv is None else argv)])
    if str(options.report) != "-":
        previous = options.report.read_text() if options.report.exists() else ""
        options.report.write_text(render(record, findings, read_events(events), command=command, previous=previous))
    for invariant in findings.invariants:
        print(f"  {'held  ' if invariant.held else 'FAILED'}  {invariant.claim}: {invariant.found}")  # noqa: T201
    broken = [invariant for invariant in findings.invariants if not invariant.held]
    if broken:
        print(f"chaos: seed {options.seed} broke: {broken[0].claim}: {broken[0].found}", file=sys.stderr)  # noqa: T201
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
