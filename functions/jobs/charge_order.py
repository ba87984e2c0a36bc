"""Charge an order once, however often the job runs: the key is per order, not per message."""

from datetime import timedelta

from pydantic import Field

from conveyor.contract.declarations import RetryPolicy
from conveyor.contract.job_context import JobContext
from conveyor.contract.payloads import Payload
from conveyor.sdk.jobs import job
from functions.providers.payments import CardDeclinedError, PaymentProvider, RateLimitedError

_payments = PaymentProvider()


class ChargeOrder(Payload):
    order_id: str = Field(min_length=1)
    amount_cents: int = Field(gt=0)
    currency: str = Field(pattern=r"^[A-Z]{3}$")


@job(
    "charge_order",
    queue="critical",
    model=ChargeOrder,
    idempotency_key="{order_id}#charge_v1",
    retry=RetryPolicy(max_attempts=8, base=timedelta(seconds=1), cap=timedelta(minutes=5)),
    timeout=timedelta(seconds=10),
    retry_on=(RateLimitedError,),
    permanent_on=(CardDeclinedError,),
    destinations=("payments",),
)
def charge_order(payload: ChargeOrder, ctx: JobContext) -> None:
    # The charge is recorded in the effect ledger: intended before the call, confirmed after. The effect's key,
    # the same on every attempt, reaches the provider, which dedupes on it as Stripe does; a charge confirmed by
    # an earlier attempt is not made again, and one never confirmed is what `conveyor reconcile` lists.
    request = {"order_id": payload.order_id, "amount_cents": payload.amount_cents, "currency": payload.currency}
    with ctx.effect("payments.charge", request=request) as effect:
        if not effect.done:
            _payments.charge(
                order_id=payload.order_id,
                amount_cents=payload.amount_cents,
                currency=payload.currency,
                idempotency_key=effect.key,
                job_id=ctx.job_id,
            )
