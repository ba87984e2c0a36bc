"""Row 4: cold import of the worker's entry point against a bare Powertools handler (bench/bare_handler.py).

Each import runs in a fresh interpreter with ``-X importtime``; the figure is the top-level
module's cumulative time, the median of several runs. One untimed run of each comes first, so
that both read compiled bytecode, as a deployed package does. The environment is Lambda's as the
stack sets it (``LAMBDA_TASK_ROOT``, active tracing, the topology named by ``CONVEYOR_TOPOLOGY``),
so each module does at import what it does on a cold start in Lambda, and nothing else.
"""

import os
import statistics
import subprocess
import sys
from pathlib import Path

from bench.figures import Figure, Row, Table, Target
from conveyor.contract.loader import TOPOLOGY_ENV, topology_spec

KEY = "cold_import"
TITLE = "Cold import of the worker entry point vs a bare Powertools handler with the same utilities"
TARGET = Target(1.0)
ROOT = Path(__file__).resolve().parents[1]
WORKER = "functions.worker"
BARE = "bench.bare_handler"
PREFIX = "import time:"
MILLISECONDS_PER_US = 1 / 1000
# Passed through from this process: where the interpreter finds its programs and its home.
KEPT_ENVIRONMENT = ("PATH", "HOME", "LANG", "TMPDIR")
# Packages shown in the "where the time goes" table.
WHERE_ROWS = 8


def cumulative_us(report: str, module: str) -> int:
    """The cumulative microseconds ``-X importtime`` reports for ``module`` imported at the top level.

    Lines read ``import time: <self> | <cumulative> | <indent><name>``, two spaces of indent per
    level of nesting; a top-level import has none.
    """
    for line in report.splitlines():
        if not line.startswith(PREFIX):
            continue
        parts = line[len(PREFIX) :].split("|")
        if len(parts) == 3 and parts[2].removeprefix(" ") == module and parts[1].strip().isdigit():
            return int(parts[1])
    raise ValueError(f"no top-level import of {module} in the -X importtime report")


def lambda_environment() -> dict[str, str]:
    """What a worker function's process has at import, as far as the import looks."""
    kept = {name: os.environ[name] for name in KEPT_ENVIRONMENT if name in os.environ}
    return kept | {
        "LAMBDA_TASK_ROOT": str(ROOT),
        "AWS_LAMBDA_FUNCTION_NAME": "conveyor-default-worker",
        "AWS_REGION": "us-east-1",
        "AWS_DEFAULT_REGION": "us-east-1",
        TOPOLOGY_ENV: topology_spec(),
    }


def self_us_by_package(report: str) -> dict[str, int]:
    """Each top-level package's own microseconds in an ``-X importtime`` report: where an import's time goes."""
    spent: dict[str, int] = {}
    for line in report.splitlines():
        parts = line.removeprefix(PREFIX).split("|") if line.startswith(PREFIX) else []
        if len(parts) == 3 and parts[0].strip().isdigit():
            package = parts[2].strip().split(".")[0]
            spent[package] = spent.get(package, 0) + int(parts[0])
    return spent


def import_report(module: str, environment: dict[str, str]) -> str:
    """The ``-X importtime`` report of one cold import of ``module`` in a fresh interpreter."""
    done = subprocess.run(  # noqa: S603 - this interpreter, a module name of this package
        [sys.executable, "-X", "importtime", "-c", f"import {module}"],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"importing {module} failed: {done.stderr.strip().splitlines()[-1:]}")
    return done.stderr


def measure(*, runs: int) -> Row:
    environment = lambda_environment()
    for module in (WORKER, BARE):
        import_report(module, environment)
    times: dict[str, list[int]] = {WORKER: [], BARE: []}
    spent: dict[str, list[dict[str, int]]] = {WORKER: [], BARE: []}
    for _ in range(runs):
        for module in (WORKER, BARE):
            report = import_report(module, environment)
            times[module].append(cumulative_us(report, module))
            spent[module].append(self_us_by_package(report))
    figure = Figure(
        name=f"import {WORKER}",
        value=statistics.median(times[WORKER]) * MILLISECONDS_PER_US,
        unit="ms",
        anchor=statistics.median(times[BARE]) * MILLISECONDS_PER_US,
        anchor_label=f"import {BARE}",
        target=TARGET,
    )
    notes = (
        f"Median of {runs} fresh interpreters each (`python -X importtime`), after one untimed import of each.",
        "Lambda's environment as the stack sets it: active tracing (so both build a Tracer), the topology "
        f"named by {TOPOLOGY_ENV}. The worker's figure includes loading the project's declarations "
        "(its job modules), which a bare handler does not have.",
        "Why the 1.0x target is not met: both import the same Powertools utilities, boto3, pydantic and the "
        "X-Ray SDK; the difference is Conveyor's own modules (the envelope's and declarations' pydantic "
        "models, cron evaluation, the message builder) and the project's job modules, as the table shows. "
        "Already gone: the X-Ray SDK where tracing is off, Powertools' parser models (which load when pydantic "
        "is imported before its batch module), the relay and leases. What would reach it: pydantic models "
        "built on first use (defer_build) would move their cost to the first invocation, not remove it.",
    )
    return Row(KEY, TITLE, (figure,), (_where_the_time_goes(spent),), notes=notes, data={"import_us": times})


def _where_the_time_goes(spent: dict[str, list[dict[str, int]]]) -> Table:
    """Median own time per top-level package on each side, the packages that differ most first."""
    medians = {
        module: {
            package: statistics.median(run.get(package, 0) for run in runs)
            for package in {name for run in runs for name in run}
        }
        for module, runs in spent.items()
    }
    packages = sorted(
        set(medians[WORKER]) | set(medians[BARE]),
        key=lambda package: -abs(medians[WORKER].get(package, 0) - medians[BARE].get(package, 0)),
    )
    return Table(
        "Where the time goes: each package's own import time (ms, median), the largest differences first",
        ("package", WORKER, BARE),
        tuple(
            (package, *(f"{medians[module].get(package, 0) * MILLISECONDS_PER_US:.1f}" for module in (WORKER, BARE)))
            for package in packages[:WHERE_ROWS]
        ),
    )
