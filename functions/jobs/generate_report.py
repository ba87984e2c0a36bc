"""Generate a report over thousands of rows in resumable chunks: checkpoints, and a hand-off before the timeout.

Progress (the next row to process) is checkpointed every ``CHECKPOINT_EVERY`` rows, so a worker
killed mid-run is resumed from its last checkpoint, not from row zero; the rows after that
checkpoint are processed again, which is why each row's effect is applied once per report
however often the row is processed. Before each row the job checks the time its run has left,
and once that is under ``HANDOFF_RESERVE`` it hands the rest to its next chunk, so no chunk runs
into the function timeout (or Lambda's 15-minute ceiling). Each run processes at least one
row, so a chain of chunks always moves forward.
"""

from collections.abc import Callable
from datetime import timedelta

from pydantic import Field

from conveyor.contract.job_context import JobContext
from conveyor.contract.payloads import Payload
from conveyor.sdk.jobs import job
from functions.providers.effects import EffectsLedger

PROVIDER = "reports"
MAX_ROWS = 1_000_000
# One checkpoint (a 1 KB write) per this many rows: at most this many are processed again after a crash.
CHECKPOINT_EVERY = 200
# Hand off when less than this is left: room for one slow row, the hand-off's two calls, and the ack.
HANDOFF_RESERVE = timedelta(seconds=15)
# The checkpointed state: the first row not yet processed.
NEXT_ROW = "next_row"

_effects = EffectsLedger()

RowHandler = Callable[[str, int, JobContext], None]


class GenerateReport(Payload):
    report_id: str = Field(min_length=1)
    rows: int = Field(gt=0, le=MAX_ROWS)


def row_key(report_id: str, row: int) -> str:
    return f"{PROVIDER}:{report_id}:row:{row}"


def record_row(ledger: EffectsLedger, report_id: str, row: int, job_id: str) -> None:
    """One row's work: counted every time it runs, applied once per report (the report id is the token)."""
    key = row_key(report_id, row)
    ledger.call(key, provider=PROVIDER, job_id=job_id)
    ledger.apply_once_per_token(key, report_id, provider=PROVIDER, job_id=job_id)


def generate_in_chunks(
    payload: GenerateReport,
    ctx: JobContext,
    process_row: RowHandler,
    *,
    checkpoint_every: int = CHECKPOINT_EVERY,
    reserve: timedelta = HANDOFF_RESERVE,
) -> None:
    """Process rows from where the last run stopped, checkpointing as it goes and handing off in time."""
    state = ctx.resume_state()
    first = int(state[NEXT_ROW]) if state else 0
    if first:
        ctx.logger.info("resuming report", extra={NEXT_ROW: first})
    for row in range(first, payload.rows):
        if row > first and ctx.remaining_time() < reserve:
            ctx.continue_later({NEXT_ROW: row})
        process_row(payload.report_id, row, ctx)
        if (row + 1) % checkpoint_every == 0:
            ctx.checkpoint({NEXT_ROW: row + 1})


def _record(report_id: str, row: int, ctx: JobContext) -> None:
    record_row(_effects, report_id, row, ctx.job_id)


# Under the bulk queue's 5-minute function timeout, so the other records of its batch keep a minute.
@job("generate_report", queue="bulk", model=GenerateReport, timeout=timedelta(minutes=4))
def generate_report(payload: GenerateReport, ctx: JobContext) -> None:
    generate_in_chunks(payload, ctx, _record)
