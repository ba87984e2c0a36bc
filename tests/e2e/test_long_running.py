"""Long-running jobs end to end: a report spanning several chunks, its worker killed mid-chunk.

`conveyor local work` runs as its own process and is killed with SIGKILL (no drain) once the report
has checkpointed; a second worker then finishes it. What users rely on: every row's effect
happens once, the second worker resumes from the checkpoint (rows before it are never processed
again, at most one checkpoint interval after it is), and nothing is left on the queue or the DLQ.
"""

import json
from pathlib import Path

import pytest

from conveyor.contract.topology import Topology
from conveyor.sdk.prepare import JobRequest
from conveyor.worker import checkpoints
from functions.jobs.generate_report import NEXT_ROW, row_key
from functions.providers.effects import Effect
from tests.e2e.conftest import LocalAws, jobs_process, wait_until
from tests.fixtures.long_topology import CHECKPOINT_EVERY, QUEUE, TOPOLOGY

SPEC = "tests.fixtures.long_topology:TOPOLOGY"
REPORT = "r-killed"
# About six seconds of rows: two or three chunks of a 3-second function timeout.
ROWS = 60


@pytest.fixture
def topology() -> Topology:
    return TOPOLOGY


def checkpointed(aws: LocalAws) -> list[int]:
    """The row each stored checkpoint resumes from: the running chunk's, and a handed-off chunk's if any."""
    items = aws.dynamodb.scan(TableName=aws.provisioned.checkpoints_table, ConsistentRead=True)["Items"]
    return sorted(int(json.loads(item[checkpoints.STATE]["S"])[NEXT_ROW]) for item in items)


def rows(aws: LocalAws) -> dict[int, Effect]:
    """Each row's effect so far, for the rows that have one."""
    effects = aws.effects()
    return {row: effects[row_key(REPORT, row)] for row in range(ROWS) if row_key(REPORT, row) in effects}


def resumed_from(worker_stdout: str) -> list[int]:
    """The rows the worker's runs resumed from, from its JSON log."""
    resumed = []
    for line in worker_stdout.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and entry.get("message") == "resuming report":
            resumed.append(int(entry[NEXT_ROW]))
    return resumed


def test_report_killed_mid_chunk_resumes_from_its_checkpoint_and_applies_each_row_once(
    aws: LocalAws, tmp_path: Path
) -> None:
    queue = aws.provisioned.queues[QUEUE]
    aws.enqueue_many([JobRequest("slow_report", {"report_id": REPORT, "rows": ROWS})])

    with jobs_process("work", "--endpoint", aws.endpoint, workdir=tmp_path / "first", topology=SPEC) as first:
        wait_until(
            lambda: first.running() and max(checkpointed(aws), default=0) >= 2 * CHECKPOINT_EVERY,
            "the report has checkpointed",
        )
        first.kill()  # kill -9 mid-chunk: no drain; the heartbeat's hold lapses within a function timeout
    at_kill = checkpointed(aws)
    assert len(rows(aws)) < ROWS, "the report finished before the worker was killed, so nothing was tested"

    with jobs_process("work", "--endpoint", aws.endpoint, workdir=tmp_path / "second", topology=SPEC) as second:
        wait_until(
            lambda: second.running() and len(rows(aws)) == ROWS and aws.is_empty(queue.url),
            "a second worker has processed every row and emptied the queue",
        )
        out, _ = second.output()

    effects = rows(aws)
    assert {effect.applied for effect in effects.values()} == {1}, "each row's effect happened once"
    assert all(effects[row].calls == 1 for row in range(at_kill[0])), "rows before the checkpoint never ran again"
    assert sum(effect.calls for effect in effects.values()) - ROWS <= CHECKPOINT_EVERY
    assert set(at_kill) <= set(resumed_from(out)), second.describe()
    assert aws.is_empty(queue.dlq_url)
