"""A fake email provider. Like most, it does not deduplicate: every accepted call sends a mail.

Test mode: a recipient containing ``bounce`` hard-bounces (permanent); ``flaky-<n>`` fails the
first n calls with a 503.
"""

from functions.providers.effects import EffectsLedger
from functions.providers.faults import transient_failures_for

PROVIDER = "email"


class EmailUnavailableError(Exception):
    """The provider answered 503: try again later."""


class HardBounceError(Exception):
    """The address does not exist: sending again cannot help."""


def effect_key(to: str, template: str) -> str:
    return f"{PROVIDER}:{template}:{to}"


class EmailProvider:
    def __init__(self, ledger: EffectsLedger | None = None) -> None:
        self._ledger = ledger or EffectsLedger()

    def send(self, *, to: str, template: str, job_id: str) -> None:
        key = effect_key(to, template)
        calls = self._ledger.call(key, provider=PROVIDER, job_id=job_id).calls
        if "bounce" in to:
            raise HardBounceError(f"550 mailbox unavailable: {to}")
        if calls <= transient_failures_for(to):
            raise EmailUnavailableError("503 service unavailable")
        self._ledger.apply(key, provider=PROVIDER, job_id=job_id)
