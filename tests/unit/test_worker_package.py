"""The worker asset's hash follows exactly the files that ship."""

from pathlib import Path

import pytest

from infra import worker_package


@pytest.fixture
def sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "functions").mkdir()
    (tmp_path / "functions" / "worker.py").write_text("handler = None\n")
    (tmp_path / "conveyor").mkdir()
    (tmp_path / "conveyor" / "__init__.py").write_text("")
    monkeypatch.setattr(
        worker_package, "SOURCES", {"functions": tmp_path / "functions", "conveyor": tmp_path / "conveyor"}
    )
    return tmp_path


def test_hash_changes_with_shipped_code_only(sources: Path) -> None:
    before = worker_package.source_hash()
    cache = sources / "conveyor" / "__pycache__"
    cache.mkdir()
    (cache / "x.cpython-311.pyc").write_bytes(b"\x00")
    assert worker_package.source_hash() == before
    (sources / "functions" / "worker.py").write_text("handler = print\n")
    assert worker_package.source_hash() != before


def test_hash_changes_when_a_file_moves(sources: Path) -> None:
    before = worker_package.source_hash()
    (sources / "functions" / "worker.py").rename(sources / "functions" / "entry.py")
    assert worker_package.source_hash() != before
