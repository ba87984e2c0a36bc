"""docs/reliability.md keeps the latest run of every seed: a rerun replaces its seed's row, others stay."""

from chaos.report import RUNS_END, RUNS_HEADER, RUNS_START, kept_runs


def row(seed: int, result: str) -> str:
    return f"| {seed} | 1000 | 2026-12-02 06:00 | {result} | 0 | 0 / 0 | 262 | 3 / 1 | 0 | 40s |"


def test_a_rerun_replaces_its_seeds_row_and_keeps_the_others_in_seed_order() -> None:
    previous = "\n".join(["# old", RUNS_START, *RUNS_HEADER, row(3, "held"), row(1, "**FAILED**"), RUNS_END, "rest"])
    assert kept_runs(previous, row(1, "held")) == [row(1, "held"), row(3, "held")]
    assert kept_runs(previous, row(2, "held")) == [row(1, "**FAILED**"), row(2, "held"), row(3, "held")]


def test_a_first_report_has_only_this_run() -> None:
    assert kept_runs("", row(7, "held")) == [row(7, "held")]
