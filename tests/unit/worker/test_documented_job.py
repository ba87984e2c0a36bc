"""The ten-line job of README.md and docs/declarations.md, as a new module, is discovered and run by the harness."""

import io
import shutil
import sys
import uuid
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from conveyor.contract.discovery import discover_jobs
from conveyor.sdk.client import JobClient
from conveyor.sdk.jobs import Job
from conveyor.worker.outcomes import Kind
from functions.topology import TOPOLOGY
from tests.aws import moto_aws
from tests.docs_examples import ROOT, python_blocks
from tests.harness_support import QueueDriver

MAX_LINES = 10
DOCUMENTED = [("README.md", "## Add a job"), ("docs/declarations.md", "## `JobType`")]


@pytest.fixture
def jobs_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A copy of functions/jobs/ under a fresh package name, importable for the test and forgotten after it."""
    package = tmp_path / f"jobs_{uuid.uuid4().hex[:8]}"
    shutil.copytree(ROOT / "functions" / "jobs", package, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield package
    for name in [name for name in sys.modules if name.split(".")[0] == package.name]:
        del sys.modules[name]


@pytest.mark.parametrize(("page", "heading"), DOCUMENTED)
def test_the_documented_job_is_found_and_runs_with_no_other_edit(
    page: str, heading: str, jobs_copy: Path, logs: io.StringIO
) -> None:
    (example,) = python_blocks(page, heading)
    assert len(example.splitlines()) <= MAX_LINES, example
    (jobs_copy / "greet.py").write_text(example, encoding="utf-8")

    # What functions/topology.py declares, over the copy: the new module is its only change.
    topology = replace(TOPOLOGY, job_types=discover_jobs(jobs_copy.name))
    assert sorted(job.name for job in topology.job_types) == sorted(["greet", *(j.name for j in TOPOLOGY.job_types)])
    greet = topology.job_type("greet")
    assert isinstance(greet, Job)

    for aws in moto_aws(topology):
        driver = QueueDriver(aws, greet.queue)
        job_id = greet.enqueue(greet.model(name="Ada"), client=JobClient(topology, sqs_client=aws.sqs))
        driver.now = datetime.now(UTC)  # the harness's clock at the enqueue's time, not the drivers' fixed one
        assert driver.run(*driver.receive()) == []
        assert [(o.job_type, o.job_id, o.kind) for o in driver.outcomes] == [("greet", job_id, Kind.SUCCEEDED)]
    assert "hello Ada" in logs.getvalue()
