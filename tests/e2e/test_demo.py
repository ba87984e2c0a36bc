"""`conveyor local demo` end to end: a small scenario played on a fresh platform, reported and checked.

The project's own scenario (scenarios/demo.py) is what `make demo` plays; these runs use small
ones on the end-to-end topology, so the engine's report, legend and exit status are tested in
seconds: a scenario whose invariants hold exits 0, one whose plan cannot come true exits 1.
"""

from pathlib import Path

import pytest
from moto.moto_api._internal.models import moto_api_backend

from conveyor.cli.main import main
from conveyor.local.demo import LEGEND, NEXT_STEPS
from tests.e2e.conftest import TOPOLOGY_SPEC, point_at


def play(scenario: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # The demo writes its logs and raw metric values under the working directory's .cache.
    monkeypatch.chdir(tmp_path)
    # Registers the variables the demo sets for its embedded AWS, so the test's end removes them.
    point_at(monkeypatch, "http://127.0.0.1:1")
    try:
        main(["--topology", TOPOLOGY_SPEC, "local", "demo", "--scenario", f"tests.fixtures.demo_scenario:{scenario}"])
    finally:
        # moto keeps its state per process, not per server (what POST /moto-api/reset does).
        moto_api_backend.reset()


def test_a_scenario_that_holds_reports_with_its_legend_and_what_to_try_next(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    play("SCENARIO", monkeypatch, tmp_path)

    out = capfd.readouterr().out
    legend_at = out.index(LEGEND[0])
    assert all(line in out for line in LEGEND)
    assert legend_at < out.index("QUEUE ") < out.index("Invariants")
    assert "held    every job ended as planned: 4 as planned" in out
    assert "held    the DLQ holds the job whose attempts ran out: {'attempts_exhausted': 1}" in out
    assert "FAILED" not in out
    # The three commands come last.
    assert out.rstrip().splitlines()[-len(NEXT_STEPS) :] == [
        line for line in out.rstrip().splitlines() if any(line.lstrip().startswith(c) for c, _ in NEXT_STEPS)
    ]
    assert (tmp_path / ".cache" / "demo" / "worker.log").stat().st_size > 0


def test_a_scenario_whose_plan_fails_exits_non_zero_naming_the_failed_invariant(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        play("WRONG", monkeypatch, tmp_path)

    assert exited.value.code == 1
    captured = capfd.readouterr()
    assert "FAILED  the DLQ holds the job whose attempts ran out: {'attempts_exhausted': 1}" in captured.out
    assert captured.err.strip() == "conveyor: demo: invariants failed (see above)"
