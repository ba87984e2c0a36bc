"""The example app's charges in the effect ledger: charge_order records them, and the payments destination's
reconcile hook asks the fake provider whether a charge with the effect's key took place."""

import json

import pytest

from conveyor.contract.effects import Verdict, default_key
from conveyor.worker.effects import EffectLedger
from functions.providers import payments
from tests.aws import Aws
from tests.harness_support import FIXED_NOW, QueueDriver, envelope

NAME = "payments.charge"


def test_a_charge_whose_answer_was_lost_is_settled_by_asking_the_provider(
    aws: Aws, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("functions.providers.effects.boto3.client", lambda service: aws.dynamodb)
    work = QueueDriver(aws, "critical")
    data = {"order_id": "o-lost", "amount_cents": 500, "currency": "EUR"}
    lost = json.loads(envelope("charge_order", data))
    # The provider charged, then the worker died before the ledger heard: only the intent is recorded.
    ledger = EffectLedger(aws.dynamodb, aws.provisioned.ledger_table, clock=lambda: FIXED_NOW)
    key = default_key("charge_order", "o-lost#charge_v1", NAME)  # the job type's idempotency key template
    ledger.intend(
        NAME, key, job_id=lost["id"], job_type="charge_order", attempt=1, request=json.dumps(data), expires_at=FIXED_NOW
    )
    payments.PaymentProvider().charge(
        order_id="o-lost", amount_cents=500, currency="EUR", idempotency_key=key, job_id=lost["id"]
    )
    never = default_key("charge_order", "o-never#charge_v1", NAME)
    ledger.intend(
        NAME,
        never,
        job_id="j-2",
        job_type="charge_order",
        attempt=1,
        request=json.dumps({"order_id": "o-never"}),
        expires_at=FIXED_NOW,
    )

    pending = {
        record.key: record for record in ledger.pending(NAME, intended_after=FIXED_NOW, intended_before=FIXED_NOW)
    }
    assert payments.reconcile_charge(pending[key]) is Verdict.CONFIRMED
    assert payments.reconcile_charge(pending[never]) is Verdict.NOT_APPLIED

    # The job's retry under the same key is a no-op at the provider, and confirms the effect in the ledger.
    work.send(envelope("charge_order", data, job_id=lost["id"]))
    assert work.run(work.receive_one()) == []
    assert payments.PaymentProvider().charged(order_id="o-lost", idempotency_key=key)
    assert [record.key for record in ledger.pending(NAME, intended_after=FIXED_NOW, intended_before=FIXED_NOW)] == [
        never
    ]
