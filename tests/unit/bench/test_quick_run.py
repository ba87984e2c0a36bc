"""`python -m bench --quick` runs the whole suite at tiny sizes and writes a report and results.json.

Every row is either measured (each figure a value, and a ratio wherever it has an anchor) or
skipped with its reason; the job profiles keep the schema `conveyor cost` reads. No timing is
asserted: on a busy machine any figure may be anything.
"""

import json
import re
import subprocess
import sys
from datetime import date
from pathlib import Path
from typing import Any

import pytest

from bench.suite import ROWS
from functions.topology import TOPOLOGY

ROOT = Path(__file__).resolve().parents[3]
PROFILE_KEYS = {
    "queue",
    "requests_per_job",
    "invocations_per_job",
    "duration_ms_per_job",
    "log_bytes_per_job",
    "metric_values_per_job",
}
REQUEST_NAME = re.compile(r"[a-z0-9]+\.[A-Z][A-Za-z]+")
QUICK_RUN_TIMEOUT_S = 120
# One xdist worker runs this module, so the quick run (the whole suite at tiny sizes) happens once.
pytestmark = pytest.mark.xdist_group("bench-quick-run")


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], str]:
    folder = tmp_path_factory.mktemp("bench")
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--output-dir", str(folder)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=QUICK_RUN_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads((folder / "results.json").read_text()), (folder / "benchmarks.md").read_text()


def test_every_row_is_measured_or_skipped_with_a_reason(quick_run: tuple[dict[str, Any], str]) -> None:
    results, _ = quick_run
    assert [row["key"] for row in results["rows"]] == [key for key, _ in ROWS]
    for row in results["rows"]:
        if row["status"] == "skipped":
            assert row["reason"], row["key"]
            continue
        assert row["status"] == "measured", row["key"]
        assert row["figures"], row["key"]
        for figure in row["figures"]:
            assert isinstance(figure["value"], float), figure
            if figure["anchor"] is not None:
                assert isinstance(figure["ratio"], float) or figure["anchor"] == 0, figure
            if figure["target"] is not None:
                assert figure["met"] in (True, False), figure


def test_the_local_runtime_rows_ran(quick_run: tuple[dict[str, Any], str]) -> None:
    """Nothing on this machine keeps the rows that need only the project's own dependencies from running."""
    results, _ = quick_run
    status = {row["key"]: (row["status"], row["reason"]) for row in results["rows"]}
    for key in ("requests_per_job", "idle", "harness_cpu", "cold_import", "throughput"):
        assert status[key] == ("measured", None), key


def test_job_profiles_keep_the_schema_conveyor_cost_reads(quick_run: tuple[dict[str, Any], str]) -> None:
    results, _ = quick_run
    profiles = results["job_profiles"]
    assert set(profiles) == {job_type.name for job_type in TOPOLOGY.job_types}
    for name, profile in profiles.items():
        assert set(profile) == PROFILE_KEYS, name
        assert profile["queue"] == TOPOLOGY.job_type(name).queue
        assert profile["requests_per_job"], name
        for request, count in profile["requests_per_job"].items():
            assert REQUEST_NAME.fullmatch(request), request
            assert isinstance(count, float)
            assert count > 0
        for key in PROFILE_KEYS - {"queue", "requests_per_job"}:
            assert isinstance(profile[key], float), (name, key)
            assert profile[key] >= 0, (name, key)


def test_results_name_the_date_machine_and_versions(quick_run: tuple[dict[str, Any], str]) -> None:
    results, _ = quick_run
    date.fromisoformat(results["measured_at"])
    assert set(results["machine"]) == {"cores", "python", "platform"}
    assert set(results["versions"]) == {"boto3", "botocore", "moto", "aws-lambda-powertools", "pydantic"}


def test_the_report_has_a_section_per_row(quick_run: tuple[dict[str, Any], str]) -> None:
    results, report = quick_run
    assert report.startswith("# Benchmarks\n")
    for number, row in enumerate(results["rows"], start=1):
        assert f"## {number}. {row['title']}" in report
