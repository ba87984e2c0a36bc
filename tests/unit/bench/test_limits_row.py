"""The destination-limits row: DynamoDB requests per call, counted by operation, on its own in-process moto.

The quick row runs once for the module; every figure is a count of the operations docs/limits.md
names ("What it costs"), never a timing.
"""

import os
from collections.abc import Iterator
from typing import Any

import pytest
from botocore.handlers import BUILTIN_HANDLERS

from bench.figures import Row
from bench.limits_row import KEY, OVERRIDE_PERIODS, TITLE, UNIT, measure, scenarios

CALLS = 20
UPDATE = "dynamodb.UpdateItem"
GET = "dynamodb.GetItem"
# An endpoint nothing listens on: the row's requests must never leave the process.
UNREACHABLE = "http://127.0.0.1:9"


@pytest.fixture(scope="module")
def limits() -> Iterator[tuple[Row, list[Any], str | None]]:
    handlers = list(BUILTIN_HANDLERS)
    with pytest.MonkeyPatch.context() as environment:
        environment.setenv("AWS_ENDPOINT_URL", UNREACHABLE)
        measured = measure(calls=CALLS)
        yield measured, handlers, os.environ.get("AWS_ENDPOINT_URL")


def _scenario(row: Row, label: str) -> tuple[dict[str, int], dict[str, int], int]:
    found = row.data["scenarios"][label]
    return found["first"], found["measured"], found["calls"]


def test_every_scenario_is_a_count_per_call_without_an_anchor(limits: tuple[Row, list[Any], str | None]) -> None:
    row, _, _ = limits
    assert (row.key, row.title, row.skipped) == (KEY, TITLE, None)
    assert len(row.figures) == len(scenarios(CALLS)) == len(row.data["scenarios"])
    for figure in row.figures:
        assert figure.unit == UNIT
        assert figure.anchor is None
        assert figure.value >= 0
    assert row.data["refused"] == 0
    assert any(note.startswith("Anchor: none") for note in row.notes)


def test_a_token_is_one_update_item_and_meets_the_documented_target(
    limits: tuple[Row, list[Any], str | None],
) -> None:
    row, _, _ = limits
    first, measured, calls = _scenario(row, "token, paced")
    assert first == {UPDATE: 1}
    assert measured == {UPDATE: calls}
    (token,) = (figure for figure in row.figures if figure.target is not None)
    assert token.value == 1.0
    assert token.met is True


def test_a_hot_worker_leases_tokens(limits: tuple[Row, list[Any], str | None]) -> None:
    row, _, _ = limits
    _, measured, calls = _scenario(row, "token, hot worker")
    assert set(measured) == {UPDATE}
    assert 0 < measured[UPDATE] < calls


def test_a_slot_is_two_update_items_once_its_map_exists(limits: tuple[Row, list[Any], str | None]) -> None:
    row, _, _ = limits
    first, measured, calls = _scenario(row, "slot")
    assert first == {UPDATE: 3}  # a failed condition (no map yet), the map's creation, the release
    assert measured == {UPDATE: 2 * calls}


def test_a_closed_breaker_reads_cached_and_writes_what_it_counts(limits: tuple[Row, list[Any], str | None]) -> None:
    row, _, _ = limits
    first, measured, calls = _scenario(row, "breaker, success")
    assert first == {GET: 1}
    assert UPDATE not in measured
    assert measured.get(GET, 0) <= 1  # 20 calls at 25/s: within about one refresh
    for label in ("breaker, failure", "breaker with error rate, success"):
        _, measured, calls = _scenario(row, label)
        assert measured == {UPDATE: calls}, label  # each write refreshes the cache: no reads


def test_a_retry_budget_writes_once_per_batch(limits: tuple[Row, list[Any], str | None]) -> None:
    row, _, _ = limits
    first, measured, jobs = _scenario(row, "retry budget")
    assert first == {UPDATE: 1}
    assert measured == {UPDATE: jobs // 10}


def test_an_override_is_read_once_per_refresh_period(limits: tuple[Row, list[Any], str | None]) -> None:
    row, _, _ = limits
    first, measured, _ = _scenario(row, "override")
    assert first == {GET: 1}
    assert measured == {GET: OVERRIDE_PERIODS}


def test_a_guarded_job_takes_a_slot_and_a_token_and_releases(limits: tuple[Row, list[Any], str | None]) -> None:
    row, _, _ = limits
    first, measured, jobs = _scenario(row, "job guard")
    assert first == {GET: 2, UPDATE: 4}  # override and breaker read; slot map created; token; release
    assert measured[UPDATE] == 3 * jobs
    assert measured.get(GET, 0) <= 2


def test_the_row_leaves_botocore_and_the_environment_as_it_found_them(
    limits: tuple[Row, list[Any], str | None],
) -> None:
    _, handlers, endpoint = limits
    assert list(BUILTIN_HANDLERS) == handlers
    assert endpoint == UNREACHABLE
