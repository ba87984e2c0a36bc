"""A fake webhook receiver, reached without a network: the URL decides how it answers.

Like httpbin: a path ``/status/<code>`` answers that code; ``flaky-<n>`` answers 503 to the
first n deliveries of an event; anything else answers 204 and takes the delivery. The
receiver does not deduplicate, so every accepted delivery is an applied effect.
"""

import re

from functions.providers.effects import EffectsLedger
from functions.providers.faults import transient_failures_for

PROVIDER = "webhooks"
_STATUS = re.compile(r"/status/(\d{3})")
ACCEPTED = 204
SERVICE_UNAVAILABLE = 503


def effect_key(url: str, event_id: str) -> str:
    return f"{PROVIDER}:{url}:{event_id}"


class WebhookReceiver:
    def __init__(self, ledger: EffectsLedger | None = None) -> None:
        self._ledger = ledger or EffectsLedger()

    def post(self, *, url: str, event_id: str, body: str, job_id: str) -> int:
        """Deliver ``body`` and return the HTTP status the receiver answered."""
        key = effect_key(url, event_id)
        calls = self._ledger.call(key, provider=PROVIDER, job_id=job_id).calls
        forced = _STATUS.search(url)
        if forced and int(forced.group(1)) != ACCEPTED:
            return int(forced.group(1))
        if calls <= transient_failures_for(url):
            return SERVICE_UNAVAILABLE
        self._ledger.apply(key, provider=PROVIDER, job_id=job_id)
        return ACCEPTED
