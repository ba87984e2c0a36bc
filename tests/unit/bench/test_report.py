"""docs/benchmarks.md: a summary of the targeted figures, then each row with its figures, tables and notes."""

from datetime import UTC, datetime

from bench.figures import TIMES, Figure, Row, Table, Target
from bench.report import number, render
from bench.results import Results


def results(*rows: Row) -> Results:
    return Results(
        measured_at=datetime(2026, 12, 2, 9, 30, tzinfo=UTC),
        command="python -m bench",
        quick=False,
        seconds=200.0,
        rows=rows,
        job_profiles={},
        machine={"cores": 2, "python": "3.11.7", "platform": "Linux"},
        versions={"boto3": "1.44.5"},
    )


MEASURED = Row(
    "requests_per_job",
    "Requests per job",
    (
        Figure("SQS requests per job", 0.314, "req/job", anchor=0.3, anchor_label="floor", target=Target(1.05)),
        Figure("SQS requests per job, charge_order", 0.4, "req/job", anchor=0.3, anchor_label="floor"),
    ),
    (Table("By operation", ("request", "per job"), (("sqs.ReceiveMessage", "0.104"),)),),
    ("Floor: one tenth of each batch call.",),
)
SKIPPED = Row.skip("celery", "Celery side by side", "bench/celery_sqs.py not written")


def test_the_summary_shows_targeted_figures_with_anchor_ratio_target_and_met() -> None:
    text = render(results(MEASURED, SKIPPED))
    figure = "| 1 | Requests per job: SQS requests per job | 0.314 req/job | 0.300 req/job (floor)"
    assert f"{figure} | 1.05{TIMES} | ≤ 1.05{TIMES} | yes |" in text
    assert "charge_order | 0.400" not in text.split("## 1.")[0]  # untargeted figures only in the row's section


def test_a_skipped_row_shows_its_reason_in_the_summary_and_its_section() -> None:
    text = render(results(MEASURED, SKIPPED))
    assert "| 2 | Celery side by side | skipped: bench/celery_sqs.py not written | - | - | - | - |" in text
    assert "## 2. Celery side by side\n\nSkipped: bench/celery_sqs.py not written\n" in text


def test_a_section_has_every_figure_its_tables_and_notes() -> None:
    section = render(results(MEASURED)).split("## 1. Requests per job\n", 1)[1]
    figure = "| SQS requests per job, charge_order | 0.400 req/job | 0.300 req/job (floor)"
    assert f"{figure} | 1.33{TIMES} | - | - |" in section
    assert "**By operation**\n\n| request | per job |\n| --- | --- |\n| sqs.ReceiveMessage | 0.104 |" in section
    assert "- Floor: one tenth of each batch call." in section


def test_a_missed_target_stands_out_and_the_header_names_machine_and_versions() -> None:
    missed = Row("idle", "Idle", (Figure("req/s", 30.2, "req/s", target=Target(1, on_ratio=False, unit="req/s")),))
    text = render(results(missed))
    assert "| 1 | Idle: req/s | 30.2 req/s | - | - | ≤ 1 req/s | **no** |" in text
    assert "Measured 2026-12-02 09:30 UTC by `python -m bench` in 200 s, on 2 cores, Python 3.11.7, Linux." in text
    assert "Versions: boto3 1.44.5." in text


def test_cells_keep_the_table_intact() -> None:
    row = Row("r", "R", tables=(Table("T", ("a",), (("x | y",),)),))
    assert "| x \\| y |" in render(results(row))


def test_numbers_keep_about_three_significant_figures() -> None:
    assert [number(v) for v in (0.3141, 3.141, 31.41, 314.1, 31415.9)] == ["0.314", "3.14", "31.4", "314", "31,416"]
