"""Deliver a webhook: retry what the receiver may recover from (5xx, 429, timeouts), dead-letter a 4xx.

The HTTP client (conveyor.worker.http_client) holds the policy: bounded timeouts, a 429's
Retry-After carried to the queue's retry, a 4xx as PermanentError, and every attempt under the
``webhooks`` destination's shared concurrency cap and breaker (functions/topology.py), so a
flood of deliveries cannot knock over a receiver that falls over at five concurrent calls.

The delivery is a POST without an idempotency key, so the client never re-sends it in process:
the receivers here do not deduplicate (functions/providers/webhooks.py), and a re-send after a
timeout would deliver twice within one attempt. The queue's retry, with its backoff and the
harness's idempotency, makes every further attempt.
"""

from datetime import timedelta

from pydantic import Field

from conveyor.contract.declarations import RetryPolicy
from conveyor.contract.job_context import JobContext
from conveyor.contract.payloads import Payload, sensitive
from conveyor.sdk.jobs import job
from conveyor.worker.http_client import HttpClient, HttpPolicy
from functions.providers.webhooks import EVENT_ID_HEADER, JOB_ID_HEADER, WebhookReceiver

DESTINATION = "webhooks"
# A receiver should answer at once and do its work later (every webhook sender's advice): a
# few seconds to connect and to answer is generous, and both fit the job's 15 s many times over.
POLICY = HttpPolicy(connect_timeout=timedelta(seconds=3), read_timeout=timedelta(seconds=5))
# The example app's receivers are fakes, answering in memory; a real app passes no pool.
_client = HttpClient(POLICY, pool=WebhookReceiver())


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
    destinations=(DESTINATION,),
)
def deliver_webhook(payload: Webhook, ctx: JobContext) -> None:
    _client.post(
        payload.url,
        ctx=ctx,
        destination=DESTINATION,
        body=payload.body,
        headers={
            "Content-Type": "application/json",
            EVENT_ID_HEADER: payload.event_id,
            JOB_ID_HEADER: ctx.job_id,
        },
    )
