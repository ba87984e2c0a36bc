"""docs/reliability.md: what one chaos run did to the platform, and what the records say came of it."""

import os
import platform
from collections.abc import Mapping
from datetime import UTC, datetime

from chaos.invariants import EFFECT_WINDOW_FAULTS, Findings
from chaos.plan import DEDUPING_PROVIDERS, NON_DEDUPING_PROVIDERS
from chaos.run import RunRecord

# The runs table keeps the latest run of each seed between these markers, across reports.
RUNS_START, RUNS_END = "<!-- runs -->", "<!-- /runs -->"
RUNS_HEADER = (
    "| Seed | Jobs | Date (UTC) | Result | Lost | Doubled (dedupe / window) | Bad inputs | Kills / crashes "
    "| Refused | Drain |",
    "|---|---|---|---|---|---|---|---|---|---|",
)


def render(record: RunRecord, findings: Findings, faults: Mapping[str, int], *, command: str, previous: str) -> str:
    """The report of this run, after a table of the latest run of every seed (kept from ``previous``)."""
    settings = record.settings
    held = all(invariant.held for invariant in findings.invariants)
    lines = [
        "# Reliability: the chaos run",
        "",
        f"<!-- Written by `{command}`; regenerate it with `make chaos`. -->",
        "",
        "The latest run of each seed, then the last run in full.",
        "",
        RUNS_START,
        *RUNS_HEADER,
        *kept_runs(previous, _run_row(record, findings, held)),
        RUNS_END,
        "",
        f"Last run on {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {platform.machine()} with "
        f"{_cores()} cores, Python {platform.python_version()}: seed **{settings.seed}**, "
        f"**{settings.jobs}** jobs. Result: **{'all invariants held' if held else 'INVARIANTS FAILED'}**.",
        "",
        "## Invariants",
        "",
        "| | Invariant | Found |",
        "|---|---|---|",
        *(
            f"| {'held' if invariant.held else '**FAILED**'} | {invariant.claim} | {_cell(invariant.found)} |"
            for invariant in findings.invariants
        ),
        "",
        "## Figures",
        "",
        "| Figure | Value |",
        "|---|---|",
        f"| jobs enqueued (incl. {record.duplicate_enqueues} duplicate enqueues) | {findings.jobs} |",
        f"| jobs sent again under their own id (redeliveries) | {record.redeliveries} |",
        f"| completed | {findings.succeeded} |",
        f"| dead-lettered as planned | {findings.dead_lettered} |",
        f"| lost | {len(findings.lost)} |",
        f"| doubled, providers that dedupe ({', '.join(sorted(DEDUPING_PROVIDERS))}) "
        f"| {len(findings.doubled_deduping)} |",
        f"| doubled inside the effect window, providers that do not ({', '.join(sorted(NON_DEDUPING_PROVIDERS))}) "
        f"| {sum(findings.doubled_in_window.values())} |",
        f"| jobs dead-lettered twice (crash between the DLQ send and the ack) | {findings.dead_letters_repeated} |",
        f"| SIGKILLs of the worker process / crashes by fault hooks / generations | "
        f"{record.kills} / {record.crashes} / {record.generations} |",
        f"| strict-mode refusals | {len(record.refusals)} |",
        f"| time to produce / time to drain after | {record.produce_s:.0f}s / {record.drain_s:.0f}s |",
        "",
        "## Faults injected",
        "",
        "| Fault | Rate | Injected |",
        "|---|---|---|",
        *(f"| `{name}` | {rate:g} | {faults.get(name, 0)} |" for name, rate in sorted(settings.faults.rates.items())),
        f"| SIGKILL of the worker process | {settings.kills} per run | {record.kills} |",
        "",
        "## Bad inputs",
        "",
        "Each class of the corpus (chaos/bad_inputs.json), mixed into the queues with good jobs, and how it ended.",
        "",
        "| Input class | Outcome (DLQ reason, or completed) |",
        "|---|---|",
        *(
            f"| {name} | {', '.join(f'{outcome} x{count}' for outcome, count in sorted(outcomes.items()))} |"
            for name, outcomes in sorted(findings.poison_by_class.items())
        ),
        "",
        "## The effect window",
        "",
        "A provider that honours an idempotency key (payments, the report rows) applies each effect once",
        "whatever the harness repeats: any second application is a defect. A provider that does not",
        "(email, webhooks) applies a second effect when the worker dies, or cannot save the job's",
        f"idempotency record, after the call and before the record: faults {', '.join(sorted(EFFECT_WINDOW_FAULTS))}.",
        "No job system closes that window alone; the checker allows at most one extra application per",
        "fault recorded in an effect's window, and fails the run on any other.",
        "",
    ]
    return "\n".join(lines)


def _run_row(record: RunRecord, findings: Findings, held: bool) -> str:
    poison = sum(sum(outcomes.values()) for outcomes in findings.poison_by_class.values())
    cells = (
        str(record.settings.seed),
        str(record.settings.jobs),
        f"{datetime.now(UTC):%Y-%m-%d %H:%M}",
        "held" if held else "**FAILED**",
        str(len(findings.lost)),
        f"{len(findings.doubled_deduping)} / {sum(findings.doubled_in_window.values())}",
        str(poison),
        f"{record.kills} / {record.crashes}",
        str(len(record.refusals)),
        f"{record.drain_s:.0f}s",
    )
    return "| " + " | ".join(cells) + " |"


def kept_runs(previous: str, row: str) -> list[str]:
    """The rows kept from ``previous`` for other seeds, and ``row``, by seed."""
    kept: dict[str, str] = {}
    if RUNS_START in previous and RUNS_END in previous:
        table = previous.split(RUNS_START, 1)[1].split(RUNS_END, 1)[0].strip().splitlines()
        kept = {line.split("|")[1].strip(): line for line in table[len(RUNS_HEADER) :] if line.startswith("|")}
    kept[row.split("|")[1].strip()] = row
    return [kept[seed] for seed in sorted(kept, key=int)]


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _cores() -> int:
    return len(os.sched_getaffinity(0))
