"""Summarize a day's orders: the job the ``nightly-report`` schedule runs (functions/topology.py).

Its one effect is keyed by the job id, which for a scheduled run names the occurrence
(``schedule:nightly-report@<scheduled time>``): the ledger then shows how often each night ran.
"""

from pydantic import Field

from conveyor.contract.job_context import JobContext
from conveyor.contract.payloads import Payload
from conveyor.sdk.jobs import job
from functions.providers.effects import EffectsLedger

PROVIDER = "reports"

_effects = EffectsLedger()


class DaySummary(Payload):
    report: str = Field(min_length=1)


def effect_key(job_id: str) -> str:
    return f"{PROVIDER}:summary:{job_id}"


@job("summarize_day", queue="default", model=DaySummary)
def summarize_day(payload: DaySummary, ctx: JobContext) -> None:
    key = effect_key(ctx.job_id)
    _effects.call(key, provider=PROVIDER, job_id=ctx.job_id)
    _effects.apply(key, provider=PROVIDER, job_id=ctx.job_id)
    ctx.logger.info("day summarized", extra={"report": payload.report})
