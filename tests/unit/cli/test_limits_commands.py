"""`conveyor limits` and `conveyor breaker` against the local target in moto, as an operator runs them.

The live state is made by the worker's own classes; every change must show in the next
`conveyor limits` and in `conveyor audit`, and every bad input must be one line on stderr, a
non-zero exit, and no change to the limits or the audit table.
"""

import json
import time
from typing import Any

import pytest

from conveyor.cli.support import EXIT_NOT_FOUND, EXIT_USAGE
from conveyor.contract.topology import Topology
from conveyor.ops import target as target_module
from conveyor.worker.destinations.breaker import Breakers
from conveyor.worker.destinations.rate import RateBuckets
from conveyor.worker.destinations.slots import Slots
from tests.aws import Aws
from tests.cli_support import conveyor
from tests.fixtures.limits_topology import EMAIL_RATE, WEBHOOKS_BREAKER, WEBHOOKS_CONCURRENCY
from tests.fixtures.limits_topology import TOPOLOGY as LIMITS_TOPOLOGY

SPEC = ("--topology", "tests.fixtures.limits_topology:TOPOLOGY")


@pytest.fixture
def topology() -> Topology:
    return LIMITS_TOPOLOGY


@pytest.fixture
def local(aws: Aws, monkeypatch: pytest.MonkeyPatch) -> Aws:
    """The CLI finds the local runtime's fixed names, here in the in-process moto (no endpoint to point at)."""
    monkeypatch.setattr(target_module, "is_local", lambda: True)
    return aws


def limits(*argv: str) -> tuple[int, str, str]:
    return conveyor(*SPEC, *argv)


def limits_json(*argv: str) -> Any:
    code, out, err = limits(*argv, "--json")
    assert (code, err) == (0, ""), err
    return json.loads(out)


def tables(aws: Aws) -> tuple[list[Any], list[Any]]:
    """Everything the commands could change: the limits table and the audit table."""
    return tuple(  # type: ignore[return-value]
        sorted(aws.dynamodb.scan(TableName=table)["Items"], key=json.dumps)
        for table in (aws.provisioned.limits_table, aws.provisioned.audit_table)
    )


def table_cells(line: str) -> list[str]:
    """A table line's cells: columns are two or more spaces apart, and no cell holds two spaces."""
    return [cell.strip() for cell in line.split("  ") if cell.strip()]


def test_limits_shows_the_live_state_workers_share(local: Aws) -> None:
    table = local.provisioned.limits_table
    for _ in range(5):
        assert RateBuckets(local.dynamodb, table).acquire("email", EMAIL_RATE) == 0
    assert Slots(local.dynamodb, table).acquire("webhooks", WEBHOOKS_CONCURRENCY, "w-1", expires_at=time.time() + 60)
    breakers = Breakers(local.dynamodb, table)
    for _ in range(WEBHOOKS_BREAKER.failures):
        breakers.record("webhooks", WEBHOOKS_BREAKER, ok=False, probe=False)

    found = {entry["name"]: entry for entry in limits_json("limits")["destinations"]}
    assert list(found) == ["payments", "email", "webhooks", "search"]
    assert found["email"]["tokens"] == pytest.approx(15, abs=0.1)
    assert found["payments"]["tokens"] is None
    assert found["webhooks"]["slots_in_use"] == 1
    assert found["webhooks"]["breaker"]["state"] == "open"
    assert found["payments"]["declared"]["rate"] == {"rate": 50, "per_s": 1.0, "burst": 10, "key": "currency"}

    code, out, err = limits("limits")
    assert (code, err) == (0, "")
    rows = {cells[0]: cells for cells in map(table_cells, out.splitlines()) if cells}
    assert rows["DESTINATION"] == ["DESTINATION", "RATE", "TOKENS", "SLOTS", "BREAKER", "RETRY BUDGET"]
    assert rows["payments"] == [
        "payments",
        "50/s burst 10 per currency",
        "per currency",
        "0/20",
        "closed",
        "0 retries/0 first, budget 0.2 over 5m",
    ]
    assert rows["email"] == ["email", "100/1h burst 20", "15.0/20", "-", "-", "-"]
    assert rows["webhooks"][2:4] == ["-", "1/5"]
    assert rows["webhooks"][4].startswith("open until ")
    assert rows["webhooks"][4].endswith("Z (3 failures within 1m)")
    assert rows["search"] == ["search", "-", "-", "-", "-", "-"]
    assert rows["QUEUE"] == ["QUEUE", "RETRY BUDGET"]
    assert rows["default"] == ["default", "0 retries/0 first, budget 0.1 over 5m"]


def test_set_and_clear_change_what_workers_apply_and_are_audited(local: Aws) -> None:
    code, out, err = limits("limits", "set", "email", "--rate", "20/s", "--concurrency", "3", "--reason", "INC-7")
    assert (code, err) == (0, "")
    shown = {line.split()[0]: " ".join(line.split()[1:]) for line in out.splitlines()}
    assert (shown["action"], shown["rate"], shown["concurrency"]) == (
        "limits.set",
        "100/1h burst 20 -> 20/s burst 20",
        "- -> 3",
    )

    email = limits_json("limits")["destinations"][1]
    assert email["effective"] == {"rate": {"rate": 20, "per_s": 1.0, "burst": 20, "key": None}, "concurrency": 3}
    assert email["override"]["reason"] == "INC-7"
    code, out, _ = limits("limits")
    assert "20/s burst 20 *" in out
    assert "* overridden" in out
    overridden = next(line for line in out.splitlines() if line.startswith("email") and "INC-7" in line)
    assert "rate 100/1h burst 20" in overridden  # the declaration it replaces

    cleared = limits_json("limits", "clear", "email", "--reason", "INC-7 over")
    assert cleared["after"] == {"rate": "100/1h burst 20", "concurrency": None}
    assert limits_json("limits")["destinations"][1]["override"] is None

    audited = limits_json("audit")
    assert sorted((entry["action"], entry["details"]["destination"]) for entry in audited) == [
        ("limits.clear", "email"),
        ("limits.set", "email"),
    ]


def test_breaker_open_for_a_while_then_close(local: Aws) -> None:
    opened = limits_json("breaker", "open", "webhooks", "--reason", "INC-9 partner down", "--for", "10m")
    assert (opened["action"], opened["before"]["state"], opened["after"]["state"]) == ("breaker.open", "closed", "open")
    breaker = limits_json("limits")["destinations"][2]["breaker"]
    assert (breaker["state"], breaker["forced"]) == ("open", True)
    _, out, _ = limits("limits")
    assert "(forced: INC-9 partner down)" in out

    closed = limits_json("breaker", "close", "webhooks", "--reason", "partner is back")
    assert closed["after"]["state"] == "closed"
    assert limits_json("limits")["destinations"][2]["breaker"]["state"] == "closed"
    assert sorted(entry["action"] for entry in limits_json("audit")) == ["breaker.close", "breaker.open"]


@pytest.mark.parametrize(
    ("argv", "code", "message"),
    [
        (
            ("limits", "set", "nope", "--rate", "5/s", "--reason", "x"),
            EXIT_NOT_FOUND,
            "unknown destination 'nope'; declared: payments,",
        ),
        (("limits", "clear", "nope", "--reason", "x"), EXIT_NOT_FOUND, "unknown destination 'nope'"),
        (
            ("limits", "set", "email", "--rate", "fast", "--reason", "x"),
            EXIT_USAGE,
            "rate 'fast': expected a positive number per s",
        ),
        (
            ("limits", "set", "email", "--rate", "0/s", "--reason", "x"),
            EXIT_USAGE,
            "rate '0/s': expected a positive number",
        ),
        (("limits", "set", "email", "--burst", "0", "--reason", "x"), EXIT_USAGE, "burst must be 1 or more, got 0"),
        (
            ("limits", "set", "webhooks", "--concurrency", "0", "--reason", "x"),
            EXIT_USAGE,
            "concurrency must be between 1 and 10000",
        ),
        (
            ("limits", "set", "webhooks", "--concurrency", "10001", "--reason", "x"),
            EXIT_USAGE,
            "between 1 and 10000, got 10001",
        ),
        (
            ("limits", "set", "webhooks", "--concurrency", "many", "--reason", "x"),
            EXIT_USAGE,
            "'many' is not a valid integer",
        ),
        (("limits", "set", "email", "--reason", "x"), EXIT_USAGE, "give --rate, --burst or --concurrency"),
        (("limits", "set", "email", "--rate", "5/s"), EXIT_USAGE, "Missing option '--reason'"),
        (("limits", "clear", "email"), EXIT_USAGE, "Missing option '--reason'"),
        (("breaker", "open", "webhooks"), EXIT_USAGE, "Missing option '--reason'"),
        (("breaker", "close", "webhooks"), EXIT_USAGE, "Missing option '--reason'"),
        (("breaker", "open", "nope", "--reason", "x"), EXIT_NOT_FOUND, "unknown destination 'nope'"),
        (("breaker", "open", "email", "--reason", "x"), EXIT_USAGE, "destination 'email' declares no breaker"),
        (("breaker", "open", "webhooks", "--reason", "x", "--for", "soon"), EXIT_USAGE, "'soon' is not a duration"),
    ],
)
def test_bad_input_is_one_line_a_nonzero_exit_and_no_change(
    local: Aws, argv: tuple[str, ...], code: int, message: str
) -> None:
    limits("limits", "set", "webhooks", "--concurrency", "4", "--reason", "before the bad input")
    before = tables(local)
    exit_code, out, err = limits(*argv)
    assert (exit_code, out) == (code, "")
    assert len(err.strip().splitlines()) == 1
    assert err.startswith("conveyor: ")
    assert message in err
    assert "Traceback" not in err
    assert tables(local) == before


def test_topology_lists_the_destinations_and_the_job_types_that_name_them() -> None:
    code, out, _ = limits("topology")
    assert code == 0
    rows = {line.split()[0]: line for line in out.splitlines() if line}
    assert rows["DESTINATION"].split() == ["DESTINATION", "LIMITS", "JOB", "TYPES"]
    cells = {name: table_cells(line) for name, line in rows.items()}
    assert cells["payments"] == ["payments", LIMITS_TOPOLOGY.destination("payments").describe(), "charge"]
    assert cells["email"] == ["email", "rate 100/1h burst 20", "notify"]
    assert cells["webhooks"] == ["webhooks", "no rate limit, concurrency 5, breaker after 3 failures/1m", "notify"]
    assert cells["search"] == ["search", "no rate limit", "-"]
