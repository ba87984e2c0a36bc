"""`conveyor reconcile` against the local target in moto, as an operator runs it after a crash.

The ledger is written by the worker itself (the harness on real SQS messages); every bad input is one
line on stderr and a non-zero exit, and a reconciliation that changes the ledger is audited.
"""

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from conveyor.cli.support import EXIT_NOT_FOUND, EXIT_USAGE
from conveyor.contract.effects import Status, default_key
from conveyor.contract.topology import Topology
from conveyor.ops.audit import AuditLog
from conveyor.ops.reconcile import AUDIT_ACTION
from conveyor.worker.effects import item_key, record_of
from tests.aws import Aws
from tests.cli_support import conveyor
from tests.fixtures.effects_topology import PROVIDER, TOPOLOGY
from tests.harness_support import QueueDriver, envelope

SPEC = ("--topology", "tests.fixtures.effects_topology:TOPOLOGY")
NAME = "gateway.charge"


@pytest.fixture
def topology() -> Topology:
    return TOPOLOGY


@pytest.fixture(autouse=True)
def no_charges_yet() -> None:
    PROVIDER.reset()


def crash(aws: Aws, order: str, fail: str, *, ago: timedelta) -> str:
    """A run of ``order`` ``ago`` (on the real clock, which the CLI reads) that fails as ``fail`` says; its key."""
    work = QueueDriver(aws, "work")
    work.now = datetime.now(UTC) - ago
    job_id = f"job-{order}"
    work.send(envelope("charge", {"order": order, "fail": fail}, job_id=job_id, created_at=work.now))
    assert len(work.run(work.receive_one())) == 1  # retried later: the effect stays intended
    return default_key("charge", job_id, NAME)


def reconcile(*argv: str) -> tuple[int, str, str]:
    return conveyor(*SPEC, "reconcile", *argv)


def reconcile_json(*argv: str) -> Any:
    code, out, err = reconcile(*argv, "--json")
    assert (code, err) == (0, ""), err
    return json.loads(out)


def status_of(aws: Aws, key: str) -> Status:
    item = aws.dynamodb.get_item(TableName=aws.provisioned.ledger_table, Key={"id": {"S": item_key(NAME, key)}})
    return record_of(item["Item"]).status


def test_lists_effects_intended_and_never_confirmed_past_the_grace_period_with_what_to_check(local: Aws) -> None:
    lost = crash(local, "o-lost", "lost", ago=timedelta(hours=2))
    crash(local, "o-running", "lost", ago=timedelta(minutes=5))  # may still be running: not a finding yet
    crash(local, "o-old", "lost", ago=timedelta(days=3))  # before --since

    found = reconcile_json("--effect", NAME, "--since", "24h")
    (finding,) = found["findings"]
    assert (finding["effect"], finding["key"], finding["job_id"], finding["job_type"], finding["attempt"]) == (
        NAME,
        lost,
        "job-o-lost",
        "charge",
        1,
    )
    assert finding["request"] == {"order": "o-lost", "card": "***"}
    assert f"idempotency key {lost}" in finding["check"]

    code, out, err = reconcile("--since", "24h")  # every declared effect by default, as a table
    assert (code, err) == (0, "")
    assert lost in out
    assert "o-running" not in out
    assert "\n1 unconfirmed, intended between" in out


def test_confirm_asks_the_hook_records_its_answers_and_audits_them(local: Aws) -> None:
    applied = crash(local, "o-applied", "lost", ago=timedelta(hours=1))  # the provider charged; the answer was lost
    never = crash(local, "o-never", "before", ago=timedelta(hours=1))  # the request never left
    unknown = crash(local, "unknowable", "lost", ago=timedelta(hours=1))  # the provider cannot tell

    report = reconcile_json("--effect", NAME, "--confirm")
    verdicts = {finding["key"]: (finding["verdict"], finding["settled"]) for finding in report["findings"]}
    assert verdicts == {
        applied: ("confirmed", True),
        never: ("not_applied", True),
        unknown: ("unknown", False),
    }
    assert (status_of(local, applied), status_of(local, never), status_of(local, unknown)) == (
        Status.CONFIRMED,
        Status.FAILED,
        Status.INTENDED,
    )
    (entry,) = AuditLog(local.dynamodb, local.provisioned.audit_table, actor="test").entries()
    assert (entry.id, entry.action) == (report["audit_id"], AUDIT_ACTION)
    assert entry.details["settled"] == {applied: "confirmed", never: "not_applied"}
    # Settled effects are no longer findings; the unknown one still is.
    assert [finding["key"] for finding in reconcile_json("--effect", NAME)["findings"]] == [unknown]


@pytest.mark.parametrize(
    ("argv", "code", "line"),
    [
        (("--effect", "gateway.refund"), EXIT_NOT_FOUND, "unknown effect 'gateway.refund'; declared: gateway.charge"),
        (("--since", "yesterday"), EXIT_USAGE, "'yesterday' is not a duration like 90s, 15m, 1h or 2d"),
        (("--since", "0h"), EXIT_USAGE, "'0h' is not a duration"),
    ],
)
def test_bad_input_is_one_line_and_a_non_zero_exit_changing_nothing(
    local: Aws, argv: tuple[str, ...], code: int, line: str
) -> None:
    crash(local, "o-1", "lost", ago=timedelta(hours=1))
    before = local.dynamodb.scan(TableName=local.provisioned.ledger_table)["Items"]
    exit_code, out, err = reconcile(*argv, "--confirm")
    assert exit_code == code
    assert out == ""
    assert len(err.strip().splitlines()) == 1
    assert line in err
    assert local.dynamodb.scan(TableName=local.provisioned.ledger_table)["Items"] == before
    assert local.dynamodb.scan(TableName=local.provisioned.audit_table)["Items"] == []
