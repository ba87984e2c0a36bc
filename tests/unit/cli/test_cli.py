"""`conveyor topology` shows what will deploy; bad input is one line on stderr and a non-zero exit."""

import json
from pathlib import Path

import pytest

from conveyor.contract.schema import envelope_schema
from functions.topology import TOPOLOGY
from tests.cli_support import conveyor

COMMITTED_SCHEMA = Path(__file__).resolve().parents[3] / "docs" / "schema" / "envelope.schema.json"


def test_topology_json_lists_every_declared_queue_with_its_derived_settings() -> None:
    code, out, _ = conveyor("topology", "--json")
    assert code == 0
    rows = {row["name"]: row for row in json.loads(out)}
    assert list(rows) == [queue.name for queue in TOPOLOGY.queues]
    critical = rows["critical"]
    assert critical["job_types"] == ["charge_order"]
    assert critical["reserved_concurrency"] == TOPOLOGY.queue("critical").reserved_concurrency
    assert critical["max_receive_count"] == TOPOLOGY.max_receive_count("critical")
    assert critical["visibility_timeout_s"] == 6 * critical["function_timeout_s"]


def test_topology_table_is_readable() -> None:
    code, out, _ = conveyor("topology")
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
def test_bad_input_is_one_line_and_a_nonzero_exit(argv: list[str], code: int, message: str) -> None:
    exit_code, out, err = conveyor(*argv)
    assert exit_code == code
    assert out == ""
    assert len(err.strip().splitlines()) == 1
    assert message in err


def test_local_runtime_without_moto_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from conveyor.local.embedded import free_port

    monkeypatch.setitem(sys.modules, "moto.moto_server.werkzeug_app", None)  # what an uninstalled package looks like
    code, _, err = conveyor("local", "up", "--port", str(free_port()))
    assert code == 1
    assert err.startswith("conveyor: the local runtime needs moto")
    assert "pip install 'conveyor[local]'" in err
    assert len(err.strip().splitlines()) == 1


def test_concurrency_above_the_reserved_concurrency_is_refused_before_any_call() -> None:
    reserved = TOPOLOGY.queue("critical").reserved_concurrency
    assert reserved is not None
    code, out, err = conveyor("concurrency", "critical", str(reserved + 1))
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1
    assert f"reserves {reserved} concurrent executions" in err


def test_the_committed_schema_passes_its_check_silently() -> None:
    assert conveyor("schema", "--check", str(COMMITTED_SCHEMA)) == (0, "", "")


def test_a_stale_schema_fails_its_check_in_one_line_naming_the_file_and_the_refresh(tmp_path: Path) -> None:
    stale = tmp_path / "envelope.schema.json"
    schema = envelope_schema(TOPOLOGY)
    schema["properties"]["type"]["enum"].remove("charge_order")  # as if written before charge_order was declared
    stale.write_text(json.dumps(schema, indent=2) + "\n", encoding="utf-8")
    code, out, err = conveyor("schema", "--check", str(stale))
    assert (code, out) == (1, "")
    assert err == (
        f"conveyor: {stale} is stale: it is not the schema of the current declarations; refresh it with "
        f"`make schema` (conveyor schema --output {stale})\n"
    )
    missing = tmp_path / "missing.json"
    assert conveyor("schema", "--check", str(missing))[::2] == (
        1,
        f"conveyor: {missing} does not exist; write it with `make schema` (conveyor schema --output {missing})\n",
    )


def test_a_schema_rewritten_by_schema_output_passes_its_check(tmp_path: Path) -> None:
    written = tmp_path / "envelope.schema.json"
    written.write_text("{}\n", encoding="utf-8")
    assert conveyor("schema", "--check", str(written))[0] == 1
    assert conveyor("schema", "--output", str(written)) == (0, "", "")
    assert conveyor("schema", "--check", str(written)) == (0, "", "")
