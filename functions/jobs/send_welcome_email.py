"""Send a user their welcome email. Version 2 added ``locale``; v1 messages are upcast."""

from typing import Any

from pydantic import Field

from conveyor.contract.job_context import JobContext
from conveyor.contract.payloads import Payload
from conveyor.sdk.jobs import job
from functions.providers.email import EmailProvider, EmailUnavailableError, HardBounceError

_email = EmailProvider()


class WelcomeEmail(Payload):
    user_id: str = Field(min_length=1)
    locale: str = "en"


def _v1_to_v2(data: dict[str, Any]) -> dict[str, Any]:
    """v1 was ``{"user": ...}``."""
    return {"user_id": data["user"], "locale": "en"}


@job(
    "send_welcome_email",
    queue="default",
    model=WelcomeEmail,
    version=2,
    upcasters={1: _v1_to_v2},
    retry_on=(EmailUnavailableError,),
    permanent_on=(HardBounceError,),
)
def send_welcome_email(payload: WelcomeEmail, ctx: JobContext) -> None:
    # The provider does not dedupe: the harness's idempotency and the effect ledger are all that stop a second
    # mail (a mail the ledger confirmed is not sent again, even by a redriven job). The call takes a token of the
    # email provider's shared rate limit (the "email" destination).
    template = f"welcome-{payload.locale}"
    with ctx.effect("email.send", request={"user_id": payload.user_id, "template": template}) as effect:
        if not effect.done:
            ctx.call(
                "email",
                lambda: _email.send(to=f"{payload.user_id}@users.example", template=template, job_id=ctx.job_id),
            )
