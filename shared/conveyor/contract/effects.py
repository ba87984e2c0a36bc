"""Effects: what a job did outside (a charge, a mail, a call), recorded so "did we charge twice?" has an answer.

An effect is declared on the destination it happens at (``Destination("payments", effects=("charge",))``
declares ``payments.charge``) and recorded by the handler around the call::

    with ctx.effect("payments.charge", request={"order_id": p.order_id}) as effect:
        if not effect.done:
            receipt = payments.charge(..., idempotency_key=effect.key)
            effect.confirm({"charge_id": receipt.id})

The worker writes the intent before the call and the outcome after it (conveyor.worker.effects);
an intent never confirmed is a crash between the call and its record, which `conveyor reconcile`
lists and a destination's ``reconcile`` hook can settle by asking the provider.
"""

import hashlib
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from conveyor.contract import limits

OPERATION_PATTERN = re.compile(r"^[a-z][a-z0-9_]{0,39}$")
# An effect's name is "<destination>.<operation>".
NAME_SEPARATOR = "."
# Providers cap their idempotency keys; Stripe's is the common bound: "up to 255 characters"
# (https://docs.stripe.com/api/idempotent_requests). A longer derived key is hashed to fit.
MAX_KEY_LENGTH = 255
# What the ledger keeps of a call's request and of its result, each as JSON: a summary for the
# operator checking the provider, not a copy of the payload. Four write units each at most, far
# under DynamoDB's item limit (limits.DYNAMODB_MAX_ITEM_BYTES). A larger summary leaves out its
# largest values, naming them under OMITTED, so the short identifying ones (an order id) stay.
MAX_RECORDED_BYTES = 4 * limits.DYNAMODB_WRITE_UNIT_BYTES
OMITTED = "_omitted"


class Status(StrEnum):
    """Where an effect stands: intended before the call, then confirmed, or failed (it did not take place)."""

    INTENDED = "intended"
    CONFIRMED = "confirmed"
    FAILED = "failed"


class Verdict(StrEnum):
    """A reconcile hook's answer: the provider did it, did not, or cannot tell (left for a person)."""

    CONFIRMED = "confirmed"
    NOT_APPLIED = "not_applied"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class EffectRecord:
    """One effect as the ledger holds it; what `conveyor reconcile` lists and a reconcile hook is asked about."""

    name: str
    key: str
    status: Status
    job_id: str
    job_type: str
    attempt: int
    intended_at: datetime
    request: dict[str, Any] | None = None
    result: dict[str, Any] | None = None
    error: str | None = None

    @property
    def destination(self) -> str:
        return self.name.partition(NAME_SEPARATOR)[0]


# A destination's reconcile hook: asked about an intent never confirmed, it checks the provider.
ReconcileHook = Callable[[EffectRecord], Verdict]


def effect_name(destination: str, operation: str) -> str:
    return f"{destination}{NAME_SEPARATOR}{operation}"


def default_key(job_type: str, idempotency_key: str, name: str) -> str:
    """The key of a run's effect when the handler gives none: the same for every retry and redelivery of the job.

    Built from the job's idempotency key (stable across attempts by design), its type and the effect's
    name, so two effects of one run, or the same effect of two job types, never share a key.
    """
    key = f"{job_type}:{idempotency_key}:{name}"
    if len(key) <= MAX_KEY_LENGTH:
        return key
    return f"{job_type}:{hashlib.sha256(key.encode()).hexdigest()}"[:MAX_KEY_LENGTH]


def summary_json(value: Mapping[str, Any] | None) -> str | None:
    """A request or result as compact JSON (str() for what JSON cannot hold)."""
    if value is None:
        return None
    return json.dumps(dict(value), separators=(",", ":"), sort_keys=True, default=str)


def bounded_summary(value: Mapping[str, Any] | None, mask: Callable[[str], str]) -> str | None:
    """``value`` as the ledger stores it: masked JSON within MAX_RECORDED_BYTES.

    Over the limit, the largest top-level values are left out, largest first, and named under OMITTED.
    """
    text = summary_json(value)
    if value is None or text is None:
        return None
    kept = dict(value)
    omitted: list[str] = []
    by_size = sorted(kept, key=lambda name: len(summary_json({name: kept[name]}) or ""), reverse=True)
    while len(mask(text).encode()) > MAX_RECORDED_BYTES and by_size:
        omitted.append(by_size.pop(0))
        del kept[omitted[-1]]
        text = summary_json({**kept, OMITTED: sorted(omitted)}) or ""
    return mask(text)


class Effect:
    """One effect of a run, as ``ctx.effect`` yields it.

    ``key`` is what to pass to the provider as its idempotency key. ``done`` is True when an earlier
    attempt confirmed the effect: do not call again (``result`` is what it recorded). ``confirm``
    records the outcome at once; a block left without an exception confirms it too.
    """

    def __init__(
        self,
        name: str,
        key: str,
        *,
        done: bool = False,
        result: dict[str, Any] | None = None,
        record: Callable[[dict[str, Any] | None], None] | None = None,
    ) -> None:
        self.name = name
        self.key = key
        self.done = done
        self.result = result
        self._record = record
        self.confirmed = done

    def confirm(self, result: Mapping[str, Any] | None = None) -> None:
        """The call took place: record it (once; a second confirm, or one of a done effect, changes nothing)."""
        if self.confirmed:
            return
        self.result = dict(result) if result is not None else None
        self.confirmed = True
        if self._record is not None:
            self._record(self.result)
