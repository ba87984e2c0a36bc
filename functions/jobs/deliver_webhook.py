"""Deliver a webhook: retry what the receiver may recover from (5xx, 429), dead-letter a 4xx."""

from datetime import timedelta
from http import HTTPStatus

from pydantic import Field

from conveyor.contract.declarations import RetryPolicy
from conveyor.contract.errors import PermanentError, RetryableError
from conveyor.contract.job_context import JobContext
from conveyor.contract.payloads import Payload, sensitive
from conveyor.sdk.jobs import job
from functions.providers.webhooks import WebhookReceiver

_receiver = WebhookReceiver()


class Webhook(Payload):
    url: str = Field(pattern=r"^https?://")
    event_id: str = Field(min_length=1)
    body: str = sensitive()


@job(
    "deliver_webhook",
    queue="bulk",
    model=Webhook,
    retry=RetryPolicy(max_attempts=10, cap=timedelta(hours=1), max_wall_time=timedelta(hours=72)),
    timeout=timedelta(seconds=15),
)
def deliver_webhook(payload: Webhook, ctx: JobContext) -> None:
    status = _receiver.post(url=payload.url, event_id=payload.event_id, body=payload.body, job_id=ctx.job_id)
    if status >= HTTPStatus.INTERNAL_SERVER_ERROR or status == HTTPStatus.TOO_MANY_REQUESTS:
        raise RetryableError(f"receiver answered {status}")
    if status >= HTTPStatus.BAD_REQUEST:
        raise PermanentError(f"receiver answered {status}")
