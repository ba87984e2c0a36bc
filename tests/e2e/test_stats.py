"""`conveyor stats` reads back what the local runtime processed, through the embedded CloudWatch."""

import json
from pathlib import Path
from typing import Any

import pytest

from conveyor.cli.main import main
from conveyor.local.demo import Observed
from conveyor.local.emf import RAW_VALUES_FILE
from conveyor.local.runtime import LocalRuntime
from conveyor.ops.stats import SOURCE_RAW
from conveyor.sdk.prepare import JobRequest
from conveyor.worker.metrics import COUNTS
from tests.e2e.conftest import LocalAws, wait_until
from tests.fixtures.e2e_topology import ALWAYS_FAILS_ATTEMPTS, QUEUE, TOPOLOGY

RECORDS = 6


def test_jobs_stats_json_matches_what_was_processed(
    aws: LocalAws, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)  # the runtime's raw values and `conveyor stats` meet in ./.cache/local
    observed = Observed()
    runtime = LocalRuntime(TOPOLOGY, endpoint_url=aws.endpoint, observer=observed.record)
    runtime.start(raw_values=RAW_VALUES_FILE)
    try:
        requests = [JobRequest("record_effect", {"name": f"stat-{i}"}) for i in range(RECORDS)]
        aws.enqueue_many([*requests, JobRequest("always_fails", {"note": "stats"})])
        wait_until(
            lambda: aws.is_empty(aws.queue_url) and aws.depth(aws.dlq_url).total == 1,
            "every job done and the failing one dead-lettered",
        )
    finally:
        runtime.drain(grace_s=10)

    def stats_with_the_dead_letter() -> dict[str, Any] | None:
        capsys.readouterr()
        main(["--topology", "tests.fixtures.e2e_topology:TOPOLOGY", "stats", QUEUE, "--since", "10m", "--json"])
        found = {row["job_type"]: row for row in json.loads(capsys.readouterr().out)}
        return found if found.get("always_fails", {}).get("dead_lettered_by_reason") else None

    # moto's GetMetricData drops the fraction of a second from EndTime: the last second shows a moment later.
    rows = wait_until(stats_with_the_dead_letter, "stats shows the dead letter")

    for job_type, row in rows.items():
        seen = {name: 0 for name in row["counts"]}
        for outcome in observed.outcomes:
            if outcome.job_type == job_type:
                seen[COUNTS[outcome.kind]] += 1
        assert row["counts"] == seen, job_type
    assert rows["record_effect"]["counts"]["Succeeded"] == RECORDS
    assert rows["always_fails"]["retried_by_reason"] == {"retryable_error": ALWAYS_FAILS_ATTEMPTS - 1}
    assert rows["always_fails"]["dead_lettered_by_reason"] == {"attempts_exhausted": 1}
    latency = rows["record_effect"]["end_to_end_ms"]
    assert rows["record_effect"]["percentiles_from"] == SOURCE_RAW
    assert latency["p50"] is not None
    assert latency["p50"] <= latency["p95"] <= latency["p99"]


def test_jobs_stats_refuses_a_bad_window_and_an_unknown_queue(capsys: pytest.CaptureFixture[str]) -> None:
    for argv, message in (
        (["stats", "--since", "soon"], "'soon' is not a duration like 90s, 15m, 1h or 2d"),
        (["stats", "nowhere"], "unknown queue 'nowhere'"),
    ):
        with pytest.raises(SystemExit) as exited:
            main(["--topology", "tests.fixtures.e2e_topology:TOPOLOGY", *argv])
        assert exited.value.code == 2
        err = capsys.readouterr().err
        assert message in err
        assert len(err.strip().splitlines()) == 1
