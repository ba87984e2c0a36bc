"""The dedupe and effect ledger row: requests per job and per effect, counted, against what the docs say they cost.

The row runs once for the module at tiny sizes. Counted requests are deterministic, so each scenario's
requests are asserted exactly: docs/contracts.md ("Dedupe at enqueue") and docs/effects.md ("Cost and
retention") give the counts.
"""

import os
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from botocore.handlers import BUILTIN_HANDLERS

from bench.counting import Call
from bench.dedupe_effects_row import EFFECT_JOBS, FIRST_RUN, KEY, RETRY, TITLE, Measured, measure, row
from bench.figures import Row
from bench.report import section

JOBS = 20
EFFECTS = 3
PUT, UPDATE = "dynamodb.PutItem", "dynamodb.UpdateItem"
TRANSACT = "dynamodb.TransactWriteItems"
SEND = "sqs.SendMessageBatch"
BATCHES = JOBS // 10
# An endpoint nothing listens on: the row's requests must never leave the process.
UNREACHABLE = "http://127.0.0.1:9"


@pytest.fixture(scope="module")
def measured() -> Iterator[tuple[Row, list[Any], str | None]]:
    handlers = list(BUILTIN_HANDLERS)
    with pytest.MonkeyPatch.context() as environment:
        environment.setenv("AWS_ENDPOINT_URL", UNREACHABLE)
        found = measure(jobs=JOBS, effect_jobs=EFFECTS)
        yield found, handlers, os.environ.get("AWS_ENDPOINT_URL")


def _scenario(row: Row, label: str) -> dict[str, int]:
    requests: dict[str, int] = row.data["scenarios"][label]["requests"]
    return requests


def _figure(row: Row, start: str) -> float:
    (value,) = (figure.value for figure in row.figures if figure.name.startswith(start))
    return value


def test_every_documented_count_is_a_target_and_met(measured: tuple[Row, list[Any], str | None]) -> None:
    found, _, _ = measured
    assert (found.key, found.title, found.skipped) == (KEY, TITLE, None)
    targeted = [figure for figure in found.figures if figure.target is not None]
    assert len(targeted) == 11
    assert all(figure.met is True for figure in targeted), [f.name for f in targeted if not f.met]
    assert found.data["refused"] == 0


def test_enqueue_many_without_keys_is_the_anchor_sqs_batches_and_no_dynamodb(
    measured: tuple[Row, list[Any], str | None],
) -> None:
    found, _, _ = measured
    assert _scenario(found, "enqueue_many, no dedupe keys") == {SEND: BATCHES}
    assert _figure(found, "enqueue_many without dedupe keys: SQS") == 0.1


def test_a_new_key_costs_a_claim_and_a_mark_besides_the_same_sends(
    measured: tuple[Row, list[Any], str | None],
) -> None:
    found, _, _ = measured
    assert _scenario(found, "enqueue_many, a new dedupe key each") == {PUT: JOBS, UPDATE: JOBS, SEND: BATCHES}
    assert _figure(found, "enqueue_many, a new dedupe key each: DynamoDB") == 2.0
    (sqs,) = (f for f in found.figures if f.name.startswith("enqueue_many, a new dedupe key each: SQS"))
    assert sqs.ratio == 1.0


def test_a_duplicate_costs_one_refused_claim_and_sends_nothing(measured: tuple[Row, list[Any], str | None]) -> None:
    found, _, _ = measured
    assert _scenario(found, "enqueue_many, duplicates of keys sent") == {PUT: JOBS}
    assert _figure(found, "enqueue_many, duplicates of keys already sent: DynamoDB") == 1.0
    assert _figure(found, "enqueue_many, duplicates of keys already sent: SQS") == 0.0


def test_transact_with_a_key_adds_a_claim_and_one_update_action(measured: tuple[Row, list[Any], str | None]) -> None:
    found, _, _ = measured
    scenarios = found.data["scenarios"]
    plain, keyed = (scenarios[f"transact, {kind}"] for kind in ("no dedupe keys", "a new dedupe key each"))
    assert (plain["requests"], plain["transaction_actions"]) == ({TRANSACT: JOBS}, JOBS)
    assert (keyed["requests"], keyed["transaction_actions"]) == ({PUT: JOBS, TRANSACT: JOBS}, 2 * JOBS)
    assert _figure(found, "transact with a new dedupe key: DynamoDB") == 2.0
    assert _figure(found, "transact with a new dedupe key: write actions") == 2.0


def test_the_relay_claims_a_keyed_outbox_item_once(measured: tuple[Row, list[Any], str | None]) -> None:
    found, _, _ = measured
    assert _scenario(found, "relay of those outbox items, no dedupe keys") == {SEND: BATCHES}
    assert _scenario(found, "relay of those outbox items, a new dedupe key each") == {PUT: JOBS, SEND: BATCHES}


def test_an_effect_is_two_ledger_writes_and_one_once_confirmed(measured: tuple[Row, list[Any], str | None]) -> None:
    found, _, _ = measured
    assert _figure(found, "ctx.effect, first run") == 2.0
    assert _figure(found, "ctx.effect on a retry") == 1.0
    scenarios = found.data["scenarios"]
    assert (scenarios[FIRST_RUN]["jobs"], scenarios[RETRY]["jobs"]) == (EFFECTS, EFFECTS)  # one block an attempt
    (table,) = found.tables
    ledger = {line[0]: line[3] for line in table.rows if line[1:3] == (UPDATE, found.data["ledger_table"])}
    assert ledger == {EFFECT_JOBS: str(3 * EFFECTS), FIRST_RUN: str(2 * EFFECTS), RETRY: str(EFFECTS)}


def test_the_report_shows_the_row_with_its_targets(measured: tuple[Row, list[Any], str | None]) -> None:
    found, _, _ = measured
    text = "\n".join(section(8, found))
    assert text.startswith(f"## 8. {TITLE}\n")
    assert f"| ctx.effect, first run (intent + confirm): ledger requests per effect ({EFFECTS} effects) | " in text
    assert "| 2.00 req/effect | - | - | ≤ 2 req/effect | yes |" in text


def test_a_broken_promise_is_marked_not_met() -> None:
    """Three DynamoDB requests for a keyed enqueue, and a retry writing its effect twice: both miss their targets."""
    dedupe, ledger, queue = Call("dynamodb", "PutItem", "conveyor-dedupe"), "conveyor-ledger", "conveyor-q"
    send = Call("sqs", "SendMessageBatch", queue)
    counts = {
        "enqueue_many, no dedupe keys": Counter({send: 1}),
        "enqueue_many, a new dedupe key each": Counter({dedupe: 30, send: 1}),
        "enqueue_many, duplicates of keys sent": Counter({dedupe: 10}),
        "transact, no dedupe keys": Counter({Call("dynamodb", "TransactWriteItems", "conveyor-outbox"): 10}),
        "transact, a new dedupe key each": Counter({Call("dynamodb", "TransactWriteItems", "conveyor-outbox"): 10}),
        "relay of those outbox items, no dedupe keys": Counter({send: 1}),
        "relay of those outbox items, a new dedupe key each": Counter({dedupe: 10, send: 1}),
        EFFECT_JOBS: Counter({Call("dynamodb", "UpdateItem", ledger): 40}),
        FIRST_RUN: Counter({Call("dynamodb", "UpdateItem", ledger): 20}),
        RETRY: Counter({Call("dynamodb", "UpdateItem", ledger): 20}),
    }
    broken = row(
        {label: Measured(label, 10, found, actions=10) for label, found in counts.items()}, ledger_table=ledger
    )
    missed = {figure.name.split(" (")[0] for figure in broken.figures if figure.met is False}
    assert missed == {
        "enqueue_many, a new dedupe key each: DynamoDB requests per job",
        "ctx.effect on a retry, the effect already confirmed: ledger requests per effect",
    }
    assert "| **no** |" in "\n".join(section(8, broken))


def test_the_row_leaves_botocore_and_the_environment_as_it_found_them(
    measured: tuple[Row, list[Any], str | None],
) -> None:
    _, handlers, endpoint = measured
    assert list(BUILTIN_HANDLERS) == handlers
    assert endpoint == UNREACHABLE
