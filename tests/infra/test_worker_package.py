"""The worker asset's hash follows exactly the files that ship, and the asset runs on its own."""

import importlib.metadata
import os
import subprocess
import sys
import sysconfig
from pathlib import Path
from types import SimpleNamespace

import pytest

from conveyor.contract.errors import DeclarationError
from infra import worker_package

# What the Lambda python runtime (boto3, botocore and their dependencies) and the Powertools
# layer (pydantic and its dependencies) put on sys.path: conveyor.contract.schedules needs nothing else.
RUNTIME_AND_LAYER = (
    "aws_lambda_powertools",
    "annotated_types",
    "boto3",
    "botocore",
    "dateutil",
    "jmespath",
    "pydantic",
    "pydantic_core",
    "s3transfer",
    "six.py",
    "typing_extensions.py",
    "typing_inspection",
    "urllib3",
)
# Runs in a fresh interpreter whose sys.path is the bundle plus RUNTIME_AND_LAYER only, with no
# system time zone database (PYTHONTZPATH=""), as on Lambda.
IMPORT_CHECK = """
import sys, zoneinfo
from datetime import UTC, datetime
bundle = sys.argv[1]
assert zoneinfo.TZPATH == (), zoneinfo.TZPATH
import croniter, tzdata
from conveyor.contract.schedules import Schedule
from conveyor.contract.cron import next_occurrence
assert croniter.__file__.startswith(bundle), croniter.__file__
assert tzdata.__file__.startswith(bundle), tzdata.__file__
schedule = Schedule("nightly", "cron(30 3 * * ? *)", job="report", timezone="Europe/Kyiv")
print(next_occurrence(schedule, datetime(2026, 7, 1, tzinfo=UTC)).isoformat())
"""


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


def test_asset_ships_the_bundled_distributions_with_their_licenses() -> None:
    shipped = {name for name, _ in worker_package._asset_files()}
    assert {
        "croniter/__init__.py",
        "croniter/croniter.py",
        "tzdata/__init__.py",
        "tzdata/zoneinfo/Europe/Kyiv",
    } <= shipped
    for name in worker_package.BUNDLED_DISTRIBUTIONS:
        info = f"{name}-{importlib.metadata.version(name)}.dist-info"
        assert f"{info}/METADATA" in shipped
        assert any(path.startswith(f"{info}/licenses/") for path in shipped)
        # pip's record of this installation (local paths, hashes of .pyc files) stays behind.
        assert f"{info}/RECORD" not in shipped
    assert not [name for name in shipped if "__pycache__" in name or name.endswith(".pyc")]


class _FakeFile(SimpleNamespace):
    """A PackagePath stand-in: what _distribution_files reads of one RECORD entry."""

    def as_posix(self) -> str:
        return str(self.path)


def _fake_distribution(version: str, files: list[str], root: Path) -> SimpleNamespace:
    for name in files:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(f"{name} {version}\n")
    return SimpleNamespace(
        files=[_FakeFile(path=name, suffix=Path(name).suffix) for name in files],
        locate_file=lambda file: root / file.path,
    )


def test_a_bundled_version_bump_changes_the_hash(
    sources: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    installed = {"1.0": _fake_distribution("1.0", ["lib/__init__.py", "lib-1.0.dist-info/METADATA"], tmp_path / "a")}
    installed["1.1"] = _fake_distribution("1.1", ["lib/__init__.py", "lib-1.1.dist-info/METADATA"], tmp_path / "b")
    monkeypatch.setattr(worker_package, "BUNDLED_DISTRIBUTIONS", ("lib",))
    version = "1.0"
    monkeypatch.setattr(importlib.metadata, "distribution", lambda name: installed[version])
    before = worker_package.source_hash()
    assert "lib/__init__.py" in {name for name, _ in worker_package._asset_files()}
    version = "1.1"
    assert worker_package.source_hash() != before


def test_a_missing_bundled_distribution_fails_synth_with_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(worker_package, "BUNDLED_DISTRIBUTIONS", ("croniter", "no-such-distribution"))
    with pytest.raises(DeclarationError, match=r"^worker bundle: distribution 'no-such-distribution' is not installed"):
        worker_package.source_hash()


def test_a_compiled_distribution_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    compiled = _fake_distribution(
        "1.0", ["fast/__init__.py", "fast/_speedups.cpython-311-x86_64-linux-gnu.so"], tmp_path
    )
    monkeypatch.setattr(worker_package, "BUNDLED_DISTRIBUTIONS", ("fast",))
    monkeypatch.setattr(importlib.metadata, "distribution", lambda name: compiled)
    with pytest.raises(DeclarationError, match=r"'fast' contains compiled extensions \(fast/_speedups\.cpython"):
        worker_package.source_hash()


def test_the_bundle_imports_conveyor_schedules_with_only_what_lambda_provides(tmp_path: Path) -> None:
    bundle = tmp_path / "task"
    worker_package.copy_asset(bundle)
    # The runtime and the layer, linked from this venv, and nothing else from it.
    runtime = tmp_path / "runtime"
    runtime.mkdir()
    site_packages = Path(sysconfig.get_paths()["purelib"])
    for name in RUNTIME_AND_LAYER:
        (runtime / name).symlink_to(site_packages / name)
    result = subprocess.run(
        [sys.executable, "-S", "-c", IMPORT_CHECK, str(bundle)],
        env={"PATH": os.environ.get("PATH", ""), "PYTHONPATH": f"{bundle}:{runtime}", "PYTHONTZPATH": ""},
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    # 03:30 in Kyiv in July (summer time, UTC+3).
    assert result.stdout.strip() == "2026-07-01T00:30:00+00:00"
