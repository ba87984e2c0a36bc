"""Sweep accounts in shards: the job the sharded ``sweep-accounts`` schedule runs (functions/topology.py).

Each occurrence enqueues one job per shard; a shard's job handles the accounts it owns by a
stable hash (``shard_of``), so the shards split the accounts between them without coordinating,
and a flexible window keeps them from all starting at the same moment.
"""

from pydantic import Field

from conveyor.contract.job_context import JobContext
from conveyor.contract.payloads import Payload
from conveyor.contract.schedule_inputs import shard_of
from conveyor.contract.schedules import MAX_SHARDS
from conveyor.sdk.jobs import job
from functions.providers.effects import EffectsLedger

PROVIDER = "accounts"
# The accounts to sweep; a real job would page through a table, keeping the keys it owns.
ACCOUNTS = tuple(f"acct-{number:02d}" for number in range(24))

_effects = EffectsLedger()


class SweepShard(Payload):
    shard: int = Field(ge=0, lt=MAX_SHARDS)
    shards: int = Field(ge=1, le=MAX_SHARDS)


def owned_accounts(shard: int, shards: int) -> list[str]:
    return [account for account in ACCOUNTS if shard_of(account, shards) == shard]


def effect_key(job_id: str) -> str:
    return f"{PROVIDER}:sweep:{job_id}"


@job("sweep_accounts", queue="default", model=SweepShard)
def sweep_accounts(payload: SweepShard, ctx: JobContext) -> None:
    key = effect_key(ctx.job_id)
    _effects.call(key, provider=PROVIDER, job_id=ctx.job_id)
    accounts = owned_accounts(payload.shard, payload.shards)
    _effects.apply(key, provider=PROVIDER, job_id=ctx.job_id)
    ctx.logger.info("accounts swept", extra={"shard": payload.shard, "accounts": len(accounts)})
