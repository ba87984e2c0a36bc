"""The worker asset holds only what runs in Lambda, its hash follows exactly what ships, and it runs on its own."""

import importlib.metadata
import os
import re
import subprocess
import sys
import sysconfig
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from types import SimpleNamespace

import pytest

from conveyor.contract.errors import DeclarationError
from conveyor.contract.loader import TOPOLOGY_ENV
from conveyor.contract.relay_settings import OUTBOX_SOURCE, RelaySettings
from conveyor.contract.settings import WorkerSettings
from functions.topology import TOPOLOGY
from infra import worker_package
from tests.infra.conftest import TOPOLOGY_SPEC

# What the Lambda python runtime and the Powertools layer put on sys.path, and nothing else.
RUNTIME_AND_LAYER = (
    # The runtime: boto3, botocore and their dependencies.
    "boto3",
    "botocore",
    "dateutil",
    "jmespath",
    "s3transfer",
    "six.py",
    "urllib3",
    # The layer: `pip install aws-lambda-powertools[all]` minus the runtime's packages
    # (powertools-lambda-python's layer_v3/docker/Dockerfile), so pydantic and its dependencies
    # (the parser extra) and aws-xray-sdk with its dependency wrapt (the tracer extra), which
    # Tracer imports when conveyor.worker.tracing creates it at import.
    "aws_lambda_powertools",
    "annotated_types",
    "aws_xray_sdk",
    "pydantic",
    "pydantic_core",
    "typing_extensions.py",
    "typing_inspection",
    "wrapt",
)
# Shipped parts every worker and relay needs: if one is missing the asset cannot run.
EXPECTED_IN_ASSET = frozenset(
    {
        "functions/worker.py",
        "functions/relay.py",
        "functions/topology.py",
        "conveyor/__init__.py",
        "conveyor/contract/declarations.py",
        "conveyor/sdk/client.py",
        "conveyor/worker/harness.py",
    }
)
# Library sides that never run in Lambda, and top-level folders of the repository that don't.
NOT_LAMBDA_SIDES = ("conveyor/cli/", "conveyor/ops/", "conveyor/local/")
NOT_LAMBDA_FOLDERS = frozenset({"scenarios", "infra", "tests"})


def not_for_lambda(shipped: Iterable[str]) -> list[str]:
    """The shipped paths Lambda never runs: the operator, CLI and local sides, demo code, infra, tests, bytecode."""
    return sorted(
        name
        for name in shipped
        if name.startswith(NOT_LAMBDA_SIDES)
        or PurePosixPath(name).parts[0] in NOT_LAMBDA_FOLDERS
        or PurePosixPath(name).stem == "demo"
        or "__pycache__" in name
        or name.endswith(".pyc")
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
# Imports one entry point the way Lambda's bootstrap does (importlib, from /var/task).
ENTRY_POINT_CHECK = """
import importlib, sys
bundle, module_name = sys.argv[1], sys.argv[2]
module = importlib.import_module(module_name)
import conveyor
for loaded in (module, conveyor):
    assert loaded.__file__.startswith(bundle), loaded.__file__
assert callable(module.handler), module.handler
print(module.__name__)
"""
# Loads the topology from the bundle, as a cold start does: its job types come from discovering functions/jobs/.
DISCOVERY_CHECK = """
import sys
from conveyor.contract.loader import load_topology
topology = load_topology()
for job_type in topology.job_types:
    module = sys.modules[job_type.handler.__module__]
    assert module.__file__.startswith(sys.argv[1]), module.__file__
print(" ".join(sorted(job_type.name for job_type in topology.job_types)))
"""
# What Lambda sets on every function (the daemon address is local here: nothing is sent at import).
LAMBDA_ENVIRONMENT = {
    "AWS_EXECUTION_ENV": "AWS_Lambda_python3.14",
    "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "512",
    "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
    "AWS_REGION": "eu-central-1",
    "AWS_DEFAULT_REGION": "eu-central-1",
    "AWS_XRAY_CONTEXT_MISSING": "LOG_ERROR",
    "AWS_XRAY_DAEMON_ADDRESS": "127.0.0.1:2000",
}
QUEUE_URL = "https://sqs.eu-central-1.amazonaws.com/123456789012/conveyor-default"
DLQ_URL = f"{QUEUE_URL}-dlq"
# The environment the stack gives each kind of function beside the topology (fake names and URLs).
WORKER_ENVIRONMENT = WorkerSettings(
    queue="default",
    queue_url=QUEUE_URL,
    dlq_url=DLQ_URL,
    idempotency_table="conveyor-idempotency",
    checkpoints_table="conveyor-checkpoints",
    schedule_runs_table="conveyor-schedule-runs",
    leases_table="conveyor-leases",
).to_environment()
RELAY_ENVIRONMENT = RelaySettings(
    source=OUTBOX_SOURCE, dlq_url=DLQ_URL, queue_urls={"default": QUEUE_URL}
).to_environment()


@dataclass(frozen=True)
class LambdaLike:
    """The copied asset (/var/task) and a folder linking only what the runtime and the layer provide."""

    bundle: Path
    runtime: Path

    def run(self, code: str, *args: str, environment: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        """Run ``code`` with nothing on sys.path but the bundle, the runtime and the layer.

        -S skips this venv's site-packages (and its editable install of the repository); -P keeps
        the working directory off sys.path, which is the bundle anyway, as /var/task is on Lambda.
        """
        return subprocess.run(
            [sys.executable, "-S", "-P", "-c", code, str(self.bundle), *args],
            env={
                "PATH": os.environ.get("PATH", ""),
                "PYTHONPATH": f"{self.bundle}:{self.runtime}",
                "PYTHONTZPATH": "",
                **(environment or {}),
            },
            cwd=self.bundle,
            capture_output=True,
            text=True,
            check=False,
        )


@pytest.fixture(scope="module")
def lambda_like(tmp_path_factory: pytest.TempPathFactory) -> LambdaLike:
    root = tmp_path_factory.mktemp("lambda")
    bundle = root / "task"
    worker_package.copy_asset(bundle)
    # The runtime and the layer, linked from this venv, and nothing else from it.
    runtime = root / "runtime"
    runtime.mkdir()
    site_packages = Path(sysconfig.get_paths()["purelib"])
    for name in RUNTIME_AND_LAYER:
        (runtime / name).symlink_to(site_packages / name)
    return LambdaLike(bundle=bundle, runtime=runtime)


@pytest.fixture
def sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A small tree shaped like the repository's: functions/, and a library with a shipped and an unshipped side."""
    for name, text in {
        "functions/worker.py": "handler = None\n",
        "conveyor/__init__.py": "",
        "conveyor/worker/harness.py": "RUNS = True\n",
        "conveyor/ops/stats.py": "OPERATOR = True\n",
    }.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    shipped = ("__init__.py", "worker")
    monkeypatch.setattr(
        worker_package,
        "SOURCES",
        {"functions": tmp_path / "functions", **{f"conveyor/{part}": tmp_path / "conveyor" / part for part in shipped}},
    )
    return tmp_path


def test_hash_changes_with_shipped_code_only(sources: Path) -> None:
    before = worker_package.source_hash()
    cache = sources / "conveyor" / "worker" / "__pycache__"
    cache.mkdir()
    (cache / "harness.cpython-311.pyc").write_bytes(b"\x00")
    (sources / "conveyor" / "ops" / "stats.py").write_text("OPERATOR = False\n")
    assert worker_package.source_hash() == before
    for shipped in ("functions/worker.py", "conveyor/__init__.py", "conveyor/worker/harness.py"):
        (sources / shipped).write_text("CHANGED = True\n")
        assert worker_package.source_hash() != before, shipped
        before = worker_package.source_hash()


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


def test_asset_ships_only_what_runs_in_lambda() -> None:
    shipped = {name for name, _ in worker_package._asset_files()}
    assert not_for_lambda(shipped) == []
    assert sorted(EXPECTED_IN_ASSET - shipped) == []


def test_copy_asset_writes_only_what_runs_in_lambda(lambda_like: LambdaLike) -> None:
    bundle = lambda_like.bundle
    written = {path.relative_to(bundle).as_posix() for path in bundle.rglob("*") if path.is_file()}
    assert written == {name for name, _ in worker_package._asset_files()}
    assert not_for_lambda(written) == []


def test_a_renamed_library_side_fails_synth_with_one_line(sources: Path) -> None:
    gone = sources / "conveyor" / "worker"
    gone.rename(sources / "conveyor" / "runner")
    with pytest.raises(DeclarationError, match=rf"^worker bundle: {re.escape(str(gone))} does not exist$"):
        worker_package.source_hash()


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


def test_the_bundle_imports_conveyor_schedules_with_only_what_lambda_provides(lambda_like: LambdaLike) -> None:
    result = lambda_like.run(IMPORT_CHECK)
    assert result.returncode == 0, result.stderr
    # 03:30 in Kyiv in July (summer time, UTC+3).
    assert result.stdout.strip() == "2026-07-01T00:30:00+00:00"


@pytest.mark.parametrize(
    ("entry_point", "function_environment"),
    [("functions.worker", WORKER_ENVIRONMENT), ("functions.relay", RELAY_ENVIRONMENT)],
    ids=["worker", "relay"],
)
def test_the_bundle_imports_the_real_entry_points_with_only_what_lambda_provides(
    lambda_like: LambdaLike, entry_point: str, function_environment: dict[str, str]
) -> None:
    """Lambda imports the handler's module at cold start: anything the asset lacks would fail every invocation."""
    environment = {
        **LAMBDA_ENVIRONMENT,
        "AWS_LAMBDA_FUNCTION_NAME": entry_point.replace(".", "-"),
        "LAMBDA_TASK_ROOT": str(lambda_like.bundle),
        TOPOLOGY_ENV: TOPOLOGY_SPEC,
        **function_environment,
    }
    result = lambda_like.run(ENTRY_POINT_CHECK, entry_point, environment=environment)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == entry_point


def test_the_bundle_discovers_every_job_module(lambda_like: LambdaLike) -> None:
    """The job types are found by listing functions/jobs/ at import: every module of it must ship."""
    shipped_modules = sorted(path.stem for path in (lambda_like.bundle / "functions" / "jobs").glob("[!_]*.py"))
    result = lambda_like.run(DISCOVERY_CHECK, environment={**LAMBDA_ENVIRONMENT, TOPOLOGY_ENV: TOPOLOGY_SPEC})
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == sorted(job.name for job in TOPOLOGY.job_types)
    assert sorted(job.handler.__module__.rsplit(".", 1)[1] for job in TOPOLOGY.job_types) == shipped_modules
