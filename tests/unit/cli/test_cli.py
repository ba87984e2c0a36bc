"""`conveyor topology` shows what will deploy; bad input is one line on stderr and a non-zero exit."""

import json

import pytest

from conveyor.cli.main import main
from functions.topology import TOPOLOGY


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        main(list(argv))
        code = 0
    except SystemExit as exited:
        code = int(exited.code or 0)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_topology_json_lists_every_declared_queue_with_its_derived_settings(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = run(capsys, "topology", "--json")
    assert code == 0
    rows = {row["name"]: row for row in json.loads(out)}
    assert list(rows) == [queue.name for queue in TOPOLOGY.queues]
    critical = rows["critical"]
    assert critical["job_types"] == ["charge_order"]
    assert critical["reserved_concurrency"] == TOPOLOGY.queue("critical").reserved_concurrency
    assert critical["max_receive_count"] == TOPOLOGY.max_receive_count("critical")
    assert critical["visibility_timeout_s"] == 6 * critical["function_timeout_s"]


def test_topology_table_is_readable(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "topology")
    header, *lines = out.splitlines()
    assert code == 0
    assert header.split()[:3] == ["QUEUE", "JOB", "TYPES"]
    bulk = next(line for line in lines if line.startswith("bulk"))
    assert bulk.split()[:5] == ["bulk", "deliver_webhook,generate_report", "1h", "100", "5s"]


@pytest.mark.parametrize(
    ("argv", "code", "message"),
    [
        (["topolgy"], 2, "conveyor: No such command 'topolgy'. Did you mean 'topology'?"),
        (["topology", "--jsn"], 2, "conveyor: No such option '--jsn'. Did you mean '--json'?"),
        (["--topology", "nowhere:X", "topology"], 1, "conveyor: topology 'nowhere:X': cannot import 'nowhere'"),
        (
            ["--topology", "tests.fixtures.bad_topology:TOPOLOGY", "topology"],
            1,
            "conveyor: queue 'orders': a FIFO queue cannot have a batching_window",
        ),
        (
            ["--topology", "functions.topology:QUEUES", "topology"],
            1,
            "module 'functions.topology' has no attribute 'QUEUES'",
        ),
        (
            ["--topology", "functions.topology:NIGHTLY_REPORT", "topology"],
            1,
            "'NIGHTLY_REPORT' is Schedule, not a conveyor",
        ),
        (["--topology", "functions.topology", "topology"], 1, "expected 'module:attribute'"),
    ],
)
def test_bad_input_is_one_line_and_a_nonzero_exit(
    capsys: pytest.CaptureFixture[str], argv: list[str], code: int, message: str
) -> None:
    exit_code, out, err = run(capsys, *argv)
    assert exit_code == code
    assert out == ""
    assert len(err.strip().splitlines()) == 1
    assert message in err


def test_local_runtime_without_moto_says_how_to_install_it(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    from conveyor.local.embedded import free_port

    monkeypatch.setitem(sys.modules, "moto.moto_server.werkzeug_app", None)  # what an uninstalled package looks like
    code, _, err = run(capsys, "local", "up", "--port", str(free_port()))
    assert code == 1
    assert err.startswith("conveyor: the local runtime needs moto")
    assert "pip install 'conveyor[local]'" in err
    assert len(err.strip().splitlines()) == 1


def test_concurrency_above_the_reserved_concurrency_is_refused_before_any_call(
    capsys: pytest.CaptureFixture[str],
) -> None:
    reserved = TOPOLOGY.queue("critical").reserved_concurrency
    assert reserved is not None
    code, out, err = run(capsys, "concurrency", "critical", str(reserved + 1))
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1
    assert f"reserves {reserved} concurrent executions" in err
