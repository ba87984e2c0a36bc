"""`python app.py` (what `cdk synth` runs) turns bad declarations into one line and exit 1."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conveyor.contract.errors import DeclarationError
from infra import app as infra_app

ROOT = Path(__file__).resolve().parents[2]


def test_undeployable_declaration_fails_synth_with_one_line() -> None:
    environment = {**os.environ, "CONVEYOR_TOPOLOGY": "tests.fixtures.bad_topology:TOPOLOGY"}
    result = subprocess.run(
        [sys.executable, "app.py"], cwd=ROOT, env=environment, capture_output=True, text=True, check=False
    )
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        "conveyor: queue 'orders': a FIFO queue cannot have a batching_window (Lambda does not batch FIFO by time)"
    ]


def test_bad_context_values_name_the_cdk_json_key(monkeypatch: pytest.MonkeyPatch) -> None:
    context = infra_app.project_context()
    monkeypatch.setattr(infra_app, "project_context", lambda: {**context, infra_app.LOG_RETENTION_CONTEXT: "FOREVER"})
    from tests.fixtures.small_topology import TOPOLOGY

    with pytest.raises(DeclarationError, match=r"cdk\.json conveyor:log-retention='FOREVER': not one of ONE_DAY"):
        infra_app.build_app(TOPOLOGY, topology_spec="tests.fixtures.small_topology:TOPOLOGY")
    monkeypatch.setattr(infra_app, "project_context", lambda: {**context, infra_app.POWERTOOLS_LAYER_CONTEXT: "latest"})
    with pytest.raises(DeclarationError, match="powertools-layer-version='latest': expected a positive integer"):
        infra_app.build_app(TOPOLOGY, topology_spec="tests.fixtures.small_topology:TOPOLOGY")
