"""A fake webhook receiver, reached without a network: the URL decides how it answers.

It stands in for a ``urllib3.PoolManager`` (conveyor.worker.http_client.Pool): ``request``
answers with a real ``urllib3.response.HTTPResponse`` built in memory, so the job's HTTP
client runs its whole policy (statuses, Retry-After, limits) on it, in the demo, the chaos
suite, the tests and a deployed example app alike.

Like httpbin: a path ``/status/<code>`` answers that code; ``/retry-after/<seconds>`` answers
429 Too Many Requests with ``Retry-After: <seconds>``; ``flaky-<n>`` answers 503 to the first n
deliveries of an event; anything else answers 204 and takes the delivery. The event is the
``Webhook-Id`` header (the Standard Webhooks name for a delivery's id); a POST without one is
a bad request. The receiver does not deduplicate, so every accepted delivery is an applied
effect.
"""

import re
from collections.abc import Mapping
from http import HTTPStatus
from typing import Any

from urllib3.response import HTTPResponse

from functions.providers.effects import EffectsLedger
from functions.providers.faults import transient_failures_for

PROVIDER = "webhooks"
_STATUS = re.compile(r"/status/(\d{3})")
_RETRY_AFTER = re.compile(r"/retry-after/(\d+)")
ACCEPTED = 204
SERVICE_UNAVAILABLE = 503
TOO_MANY_REQUESTS = 429
# The delivery's id, which receivers dedupe on (https://www.standardwebhooks.com).
EVENT_ID_HEADER = "Webhook-Id"
# The job making the delivery: the ledger records it beside each effect, for tracing a doubled one.
JOB_ID_HEADER = "Conveyor-Job-Id"


def effect_key(url: str, event_id: str) -> str:
    return f"{PROVIDER}:{url}:{event_id}"


class WebhookReceiver:
    """Every webhook URL's receiver, as a pool: ``request`` delivers and answers as the URL says."""

    def __init__(self, ledger: EffectsLedger | None = None) -> None:
        self._ledger = ledger or EffectsLedger()

    def request(
        self,
        method: str,
        url: str,
        *,
        body: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        **urlopen_kw: Any,
    ) -> HTTPResponse:
        """Deliver ``body`` to ``url``; the answer carries the status the receiver chose.

        The timeouts, retries and redirect settings of a real request are accepted and have
        nothing to act on: the answer is immediate.
        """
        received = {name.lower(): value for name, value in (headers or {}).items()}
        event_id = received.get(EVENT_ID_HEADER.lower())
        if method != "POST":
            return _answer(HTTPStatus.METHOD_NOT_ALLOWED)
        if not event_id:
            return _answer(HTTPStatus.BAD_REQUEST)
        key = effect_key(url, event_id)
        job_id = received.get(JOB_ID_HEADER.lower(), "")
        calls = self._ledger.call(key, provider=PROVIDER, job_id=job_id).calls
        forced = _STATUS.search(url)
        if forced and int(forced.group(1)) != ACCEPTED:
            return _answer(int(forced.group(1)))
        retry_after = _RETRY_AFTER.search(url)
        if retry_after:
            return _answer(TOO_MANY_REQUESTS, {"Retry-After": retry_after.group(1)})
        if calls <= transient_failures_for(url):
            return _answer(SERVICE_UNAVAILABLE)
        self._ledger.apply(key, provider=PROVIDER, job_id=job_id)
        return _answer(ACCEPTED)


def _answer(status: int, headers: Mapping[str, str] | None = None) -> HTTPResponse:
    """A complete response, as urllib3 returns one read whole (``preload_content``)."""
    try:
        reason: str | None = HTTPStatus(status).phrase
    except ValueError:
        reason = None
    return HTTPResponse(body=b"", headers=dict(headers or {}), status=status, reason=reason, preload_content=True)
