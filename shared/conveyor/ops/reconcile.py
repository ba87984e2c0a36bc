"""What `conveyor reconcile` reads and settles: effects recorded as intended and never confirmed.

Such an effect is a run that crashed (or timed out, or lost its answer) between the call to the
provider and the record of its outcome: the provider may or may not have done it. The ledger's
pending index (conveyor.worker.effects) lists them without a scan. An intent younger than GRACE may
belong to a run still in progress, so it is not a finding yet. With a destination's ``reconcile``
hook, each finding is put to the provider and the answer recorded (confirmed, or failed when it was
not applied), with one audit row for the whole reconciliation, as other operator changes are.
"""

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from conveyor.contract import limits
from conveyor.contract.destinations import Destination
from conveyor.contract.effects import EffectRecord, Verdict
from conveyor.contract.timestamps import utc_text
from conveyor.contract.topology import Topology
from conveyor.ops.target import Target
from conveyor.worker.effects import EffectLedger

# No invocation runs longer than Lambda's maximum timeout: an intent older than that belongs to no run in progress.
GRACE = limits.LAMBDA_MAX_TIMEOUT
# The audit row's action, as `conveyor audit` lists it.
AUDIT_ACTION = "reconcile"


def what_to_check(record: EffectRecord) -> str:
    """The question to put to the provider, in its own terms: the idempotency key the call carried."""
    return (
        f"ask {record.destination} whether the request with idempotency key {record.key} took place; "
        "if it did not, the job's next attempt (or a redrive) makes it with the same key"
    )


@dataclass(frozen=True)
class Finding:
    """An unconfirmed effect; with ``--confirm``, its hook's verdict and whether the ledger took it."""

    record: EffectRecord
    verdict: Verdict | None = None
    settled: bool = False
    hook_error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        record = self.record
        return {
            "effect": record.name,
            "key": record.key,
            "job_id": record.job_id,
            "job_type": record.job_type,
            "attempt": record.attempt,
            "intended_at": utc_text(record.intended_at, timespec="seconds"),
            "request": record.request,
            "check": what_to_check(record),
            "verdict": self.verdict.value if self.verdict else None,
            "settled": self.settled,
            "hook_error": self.hook_error,
        }


@dataclass(frozen=True)
class Report:
    effects: tuple[str, ...]
    intended_after: datetime
    intended_before: datetime
    findings: list[Finding]
    # Effects asked about without a hook to settle them (only with --confirm).
    without_hook: tuple[str, ...] = ()
    audit_id: str | None = None
    counts: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "effects": list(self.effects),
            "intended_after": utc_text(self.intended_after, timespec="seconds"),
            "intended_before": utc_text(self.intended_before, timespec="seconds"),
            "findings": [finding.as_dict() for finding in self.findings],
            "without_hook": list(self.without_hook),
            "counts": self.counts,
            "audit_id": self.audit_id,
        }


class Reconciliation:
    """The ledger as an operator sees it; ``clock`` is injectable, as the worker's is."""

    def __init__(
        self, target: Target, topology: Topology, *, clock: Callable[[], datetime] = lambda: datetime.now(UTC)
    ) -> None:
        self._target = target
        self._topology = topology
        self._clock = clock
        self._ledger = EffectLedger(target.clients("dynamodb"), target.ledger_table, clock=clock)

    def find(self, effects: Sequence[str], *, since: timedelta) -> Report:
        """Unconfirmed effects intended within ``since`` and before the grace period, oldest first.

        LookupError names an undeclared effect (and the declared ones).
        """
        for name in effects:
            self._declared(name)
        now = self._clock()
        after, before = now - since, now - GRACE
        findings = [
            Finding(record)
            for name in effects
            for record in self._ledger.pending(name, intended_after=after, intended_before=before)
        ]
        return Report(tuple(effects), after, before, findings)

    def settle(self, effects: Sequence[str], *, since: timedelta) -> Report:
        """Put each finding to its destination's hook and record the answers; audited as one change."""
        found = self.find(effects, since=since)
        by = f"reconcile by {self._target.actor}"
        findings = [self._settle(finding.record, by) for finding in found.findings]
        without_hook = tuple(name for name in effects if self._declared(name).reconcile is None)
        counts = {
            verdict.value: sum(1 for finding in findings if finding.settled and finding.verdict is verdict)
            for verdict in (Verdict.CONFIRMED, Verdict.NOT_APPLIED)
        }
        counts["unsettled"] = sum(1 for finding in findings if not finding.settled)
        entry = self._target.audit().record(
            AUDIT_ACTION,
            queue=None,
            details={
                "effects": list(effects),
                "intended_after": utc_text(found.intended_after, timespec="seconds"),
                "intended_before": utc_text(found.intended_before, timespec="seconds"),
                **counts,
                "settled": {
                    finding.record.key: finding.verdict.value
                    for finding in findings
                    if finding.settled and finding.verdict is not None
                },
            },
        )
        return Report(
            found.effects,
            found.intended_after,
            found.intended_before,
            findings,
            without_hook=without_hook,
            audit_id=entry.id,
            counts=counts,
        )

    def _settle(self, record: EffectRecord, by: str) -> Finding:
        hook = self._declared(record.name).reconcile
        if hook is None:
            return Finding(record)
        try:
            verdict = Verdict(hook(record))
        except Exception as error:  # one provider's failure must not stop the others' reconciliation
            return Finding(record, verdict=Verdict.UNKNOWN, hook_error=f"{type(error).__name__}: {error}")
        return Finding(record, verdict=verdict, settled=self._ledger.settle(record, verdict, by=by))

    def _declared(self, name: str) -> Destination:
        try:
            return self._topology.effect(name)
        except ValueError as error:  # DeclarationError: an operator's typo, not a broken declaration
            raise LookupError(str(error)) from error
