"""A fake payment provider that honours an Idempotency-Key the way Stripe does.

A repeated request with the same key returns the original charge without charging again;
a request with a new key charges again, so a job that reuses its key cannot double-charge.
Test mode: an order id containing ``declined`` is declined (permanent); ``flaky-<n>`` is
rate-limited on the first n calls.
"""

from conveyor import EffectRecord, Verdict
from functions.providers.effects import EffectsLedger
from functions.providers.faults import transient_failures_for

PROVIDER = "payments"


class CardDeclinedError(Exception):
    """The issuer declined the charge: retrying cannot help."""


class RateLimitedError(Exception):
    """HTTP 429 from the provider: back off and retry."""


def effect_key(order_id: str) -> str:
    return f"{PROVIDER}:charge:{order_id}"


class PaymentProvider:
    def __init__(self, ledger: EffectsLedger | None = None) -> None:
        self._ledger = ledger or EffectsLedger()

    def charged(self, *, order_id: str, idempotency_key: str) -> bool:
        """Whether a charge of the order with this Idempotency-Key took place (Stripe: list the charges by key)."""
        return self._ledger.applied_with(effect_key(order_id), idempotency_key)

    def charge(self, *, order_id: str, amount_cents: int, currency: str, idempotency_key: str, job_id: str) -> None:
        key = effect_key(order_id)
        calls = self._ledger.call(key, provider=PROVIDER, job_id=job_id).calls
        if "declined" in order_id:
            raise CardDeclinedError(f"card declined for {amount_cents} {currency}")
        if calls <= transient_failures_for(order_id):
            raise RateLimitedError("429 too many requests")
        # A repeated Idempotency-Key returns the original charge: counted, not applied again.
        self._ledger.apply_once_per_token(key, idempotency_key, provider=PROVIDER, job_id=job_id)


def reconcile_charge(record: EffectRecord) -> Verdict:
    """The payments destination's reconcile hook: ask the provider whether the charge with the effect's key happened.

    Only the order id identifies the charge (the request the ledger recorded); a record without it cannot be checked.
    """
    order_id = (record.request or {}).get("order_id")
    if not isinstance(order_id, str):
        return Verdict.UNKNOWN
    charged = PaymentProvider().charged(order_id=order_id, idempotency_key=record.key)
    return Verdict.CONFIRMED if charged else Verdict.NOT_APPLIED
