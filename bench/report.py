"""docs/benchmarks.md from a run's results: a summary against the issues' targets, then each row in full."""

import math
from collections.abc import Iterable, Sequence

from bench.figures import TIMES, Figure, Row, Table
from bench.results import Results

MET = {True: "yes", False: "**no**", None: "-"}


def number(value: float) -> str:
    """Three significant figures or so, with thousands separated."""
    if math.isnan(value):
        return "n/a"
    magnitude = abs(value)
    if magnitude >= 100:
        return f"{value:,.0f}"
    if magnitude >= 10:
        return f"{value:.1f}"
    if magnitude >= 1:
        return f"{value:.2f}"
    return f"{value:.3f}"


def ratio(figure: Figure) -> str:
    found = figure.ratio
    if found is None:
        return "-"
    return "n/a" if math.isnan(found) else f"{found:.2f}{TIMES}"


def _cells(cells: Iterable[str]) -> str:
    return "| " + " | ".join(cell.replace("|", "\\|").replace("\n", " ") for cell in cells) + " |"


def markdown_table(headers: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    return [_cells(headers), _cells("---" for _ in headers), *(_cells(row) for row in rows)]


def figure_cells(figure: Figure) -> tuple[str, str, str, str, str]:
    anchor = "-" if figure.anchor is None else f"{number(figure.anchor)} {figure.unit} ({figure.anchor_label})"
    target = "-" if figure.target is None else str(figure.target)
    return f"{number(figure.value)} {figure.unit}", anchor, ratio(figure), target, MET[figure.met]


def headline(row: Row) -> tuple[Figure, ...]:
    """The figures the summary shows: those held to a target, or all of them if none is."""
    return tuple(f for f in row.figures if f.target is not None) or row.figures


def summary(rows: Sequence[Row]) -> list[str]:
    lines: list[tuple[str, ...]] = []
    for index, row in enumerate(rows, start=1):
        if row.skipped:
            lines.append((str(index), row.title, f"skipped: {row.skipped}", "-", "-", "-", "-"))
            continue
        lines.extend((str(index), f"{row.title}: {f.name}", *figure_cells(f)) for f in headline(row))
    return markdown_table(("#", "Figure", "Value", "Anchor", "Ratio", "Must reach", "Met"), lines)


def section(index: int, row: Row) -> list[str]:
    lines = [f"## {index}. {row.title}", ""]
    if row.skipped:
        return [*lines, f"Skipped: {row.skipped}", ""]
    rows = ((f.name, *figure_cells(f)) for f in row.figures)
    lines += [*markdown_table(("Figure", "Value", "Anchor", "Ratio", "Must reach", "Met"), rows), ""]
    for table in row.tables:
        lines += _detail(table)
    lines += [f"- {note}" for note in row.notes]
    return [*lines, ""]


def _detail(table: Table) -> list[str]:
    return [f"**{table.title}**", "", *markdown_table(table.headers, table.rows), ""]


def render(results: Results) -> str:
    machine, versions = results.machine, results.versions
    lines = [
        "# Benchmarks",
        "",
        f"Measured {results.measured_at:%Y-%m-%d %H:%M} UTC by `{results.command}` in {results.seconds:.0f} s"
        + (" (quick mode: tiny sizes, not figures to quote)" if results.quick else "")
        + f", on {machine['cores']} cores, Python {machine['python']}, {machine['platform']}.",
        "Versions: " + ", ".join(f"{name} {found}" for name, found in versions.items()) + ".",
        "",
        'Every figure is a ratio to an anchor measured in the same run, or a count; "Must reach" is the target '
        "its issue set (16 for the first six rows, 17 for the limits row, 21 for dedupe at enqueue and the effect "
        "ledger's). `make bench` writes this file and `bench/results.json` (the same figures, and the job profiles "
        "`conveyor cost` reads); do not edit it by hand.",
        "",
        "## Summary",
        "",
        *summary(results.rows),
        "",
    ]
    for index, row in enumerate(results.rows, start=1):
        lines += section(index, row)
    return "\n".join(lines).rstrip() + "\n"
