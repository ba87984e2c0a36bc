"""The worker asset holds only what runs in Lambda, its hash follows exactly what ships, and it runs on its own.

Its requirements are wheels for the function's Python and platform, whatever this machine is:
tests build tiny wheels with the tags to prove which ones pip takes, and install them from a
local folder only (--no-index), never the network.
"""

import base64
import hashlib
import importlib.metadata
import os
import re
import subprocess
import sys
import sysconfig
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import pytest
from aws_cdk import aws_lambda as lambda_

from conveyor.contract.errors import DeclarationError
from conveyor.contract.loader import TOPOLOGY_ENV
from conveyor.contract.relay_settings import OUTBOX_SOURCE, RelaySettings
from conveyor.contract.settings import WorkerSettings
from conveyor.local.embedded import free_port
from functions.topology import TOPOLOGY
from infra import lambda_wheels, worker_package
from infra.app import build_app
from tests.fixtures.small_topology import TOPOLOGY as SMALL
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
    limits_table="conveyor-limits",
    ledger_table="conveyor-ledger",
).to_environment()
RELAY_ENVIRONMENT = RelaySettings(
    source=OUTBOX_SOURCE, dlq_url=DLQ_URL, queue_urls={"default": QUEUE_URL}, dedupe_table="conveyor-dedupe"
).to_environment()


@dataclass(frozen=True)
class LambdaLike:
    """The copied asset (/var/task), the files copied, and a folder linking only what the runtime and layer provide."""

    bundle: Path
    runtime: Path
    files: list[tuple[str, Path]]

    @property
    def shipped(self) -> set[str]:
        return {name for name, _ in self.files}

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
    files = worker_package.stage_asset(root / "requirements")
    worker_package.copy_asset(files, bundle)
    # The runtime and the layer, linked from this venv, and nothing else from it.
    runtime = root / "runtime"
    runtime.mkdir()
    site_packages = Path(sysconfig.get_paths()["purelib"])
    for name in RUNTIME_AND_LAYER:
        (runtime / name).symlink_to(site_packages / name)
    return LambdaLike(bundle=bundle, runtime=runtime, files=files)


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


def code_hash() -> str:
    return worker_package.asset_hash(worker_package._code_files())


def test_hash_changes_with_shipped_code_only(sources: Path) -> None:
    before = code_hash()
    cache = sources / "conveyor" / "worker" / "__pycache__"
    cache.mkdir()
    (cache / "harness.cpython-311.pyc").write_bytes(b"\x00")
    (sources / "conveyor" / "ops" / "stats.py").write_text("OPERATOR = False\n")
    assert code_hash() == before
    for shipped in ("functions/worker.py", "conveyor/__init__.py", "conveyor/worker/harness.py"):
        (sources / shipped).write_text("CHANGED = True\n")
        assert code_hash() != before, shipped
        before = code_hash()


def test_hash_changes_when_a_file_moves(sources: Path) -> None:
    before = code_hash()
    (sources / "functions" / "worker.py").rename(sources / "functions" / "entry.py")
    assert code_hash() != before


def test_asset_ships_the_worker_requirements_with_their_licenses(lambda_like: LambdaLike) -> None:
    shipped = lambda_like.shipped
    assert {
        "croniter/__init__.py",
        "croniter/croniter.py",
        "tzdata/__init__.py",
        "tzdata/zoneinfo/Europe/Kyiv",
    } <= shipped
    for requirement in worker_package.worker_requirements():
        name, version = requirement.split("==")
        info = f"{name}-{version}.dist-info"
        assert f"{info}/METADATA" in shipped
        assert any(path.startswith(f"{info}/licenses/") for path in shipped)
        # pip's record of this installation stays behind.
        assert f"{info}/RECORD" not in shipped
    assert not [name for name in shipped if "__pycache__" in name or name.endswith(".pyc")]


def test_worker_requirements_ship_at_the_versions_installed_here() -> None:
    assert worker_package.worker_requirements() == [
        f"croniter=={importlib.metadata.version('croniter')}",
        f"tzdata=={importlib.metadata.version('tzdata')}",
    ]


def test_asset_ships_only_what_runs_in_lambda(lambda_like: LambdaLike) -> None:
    assert not_for_lambda(lambda_like.shipped) == []
    assert sorted(EXPECTED_IN_ASSET - lambda_like.shipped) == []


def test_copy_asset_writes_only_what_runs_in_lambda(lambda_like: LambdaLike) -> None:
    bundle = lambda_like.bundle
    written = {path.relative_to(bundle).as_posix() for path in bundle.rglob("*") if path.is_file()}
    assert written == lambda_like.shipped
    assert not_for_lambda(written) == []


def test_a_renamed_library_side_fails_synth_with_one_line(sources: Path) -> None:
    gone = sources / "conveyor" / "worker"
    gone.rename(sources / "conveyor" / "runner")
    with pytest.raises(DeclarationError, match=rf"^worker bundle: {re.escape(str(gone))} does not exist$"):
        code_hash()


def test_a_worker_requirement_not_installed_here_fails_synth_with_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[tool.conveyor]\nworker-requirements = ["croniter", "no-such-distribution"]\n')
    monkeypatch.setattr(worker_package, "PYPROJECT", pyproject)
    with pytest.raises(DeclarationError) as raised:
        worker_package.worker_requirements()
    assert str(raised.value) == (
        "worker bundle: worker requirement 'no-such-distribution' is not installed here; pin it in the "
        "[project] dependencies of pyproject.toml and install them before synth"
    )


# --- wheels for the function's platform -------------------------------------------------------

# The tags of a compiled wheel for the function: CPython 3.14's ABI on Linux for arm64.
LAMBDA_ABI = "cp314-cp314"
EXTENSION = "fast/_speedups.cpython-314-aarch64-linux-gnu.so"


def build_wheel(wheelhouse: Path, name: str, version: str, tag: str, *, requires: Iterable[str] = ()) -> Path:
    """A minimal wheel, tagged ``tag``: a package with a compiled extension (fake bytes) and its dist-info."""
    info = f"{name}-{version}.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    files = {
        f"{name}/__init__.py": f"VERSION = {version!r}\n".encode(),
        f"{name}/_speedups.cpython-314-aarch64-linux-gnu.so": f"\x7fELF {name} {version} {tag}".encode(),
        f"{info}/METADATA": (metadata + "".join(f"Requires-Dist: {need}\n" for need in requires)).encode(),
        f"{info}/WHEEL": f"Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: false\nTag: {tag}\n".encode(),
    }
    records = [
        f"{path},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},{len(data)}"
        for path, data in files.items()
    ]
    wheelhouse.mkdir(parents=True, exist_ok=True)
    wheel = wheelhouse / f"{name}-{version}-{tag}.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, data in files.items():
            archive.writestr(path, data)
        archive.writestr(f"{info}/RECORD", "\n".join([*records, f"{info}/RECORD,,"]) + "\n")
    return wheel


def build_sdist(wheelhouse: Path, name: str, version: str) -> None:
    """A source distribution's file name: all pip needs to list it, and it never builds one here."""
    wheelhouse.mkdir(parents=True, exist_ok=True)
    (wheelhouse / f"{name}-{version}.tar.gz").write_bytes(b"")


@pytest.fixture
def requiring(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Worker requirements of ``fast==1.0``, from a wheelhouse the test fills; the code is the project's."""
    wheelhouse = tmp_path / "wheelhouse"
    monkeypatch.setattr(worker_package, "WHEELHOUSE", wheelhouse)
    monkeypatch.setattr(worker_package, "worker_requirements", lambda: ["fast==1.0"])
    return wheelhouse


@pytest.mark.parametrize(
    "platform",
    ["manylinux2014_aarch64", "manylinux_2_17_aarch64.manylinux2014_aarch64", "manylinux_2_28_aarch64"],
)
def test_a_compiled_requirement_ships_its_aarch64_wheels_files(requiring: Path, tmp_path: Path, platform: str) -> None:
    """Any glibc from manylinux2014's 2.17 to Amazon Linux 2023's 2.34 loads in the function."""
    build_wheel(requiring, "fast", "1.0", f"{LAMBDA_ABI}-{platform}")
    build_wheel(requiring, "fast", "1.0", f"{LAMBDA_ABI}-manylinux2014_x86_64")
    files = worker_package.stage_asset(tmp_path / "site")
    bundle = tmp_path / "task"
    worker_package.copy_asset(files, bundle)
    shipped = {path.relative_to(bundle).as_posix() for path in bundle.rglob("*") if path.is_file()}
    assert {EXTENSION, "fast/__init__.py", "fast-1.0.dist-info/METADATA", "functions/worker.py"} <= shipped
    assert (bundle / EXTENSION).read_bytes() == f"\x7fELF fast 1.0 {LAMBDA_ABI}-{platform}".encode()
    assert "fast-1.0.dist-info/RECORD" not in shipped


@pytest.mark.parametrize(
    "files",
    [
        ["fast-1.0-cp314-cp314-manylinux2014_x86_64.whl", "fast-1.0.tar.gz"],
        ["fast-1.0-cp311-cp311-manylinux2014_aarch64.whl"],
        ["fast-1.0-cp314-cp314-manylinux_2_39_aarch64.whl"],
        ["fast-1.0-cp314-cp314-macosx_11_0_arm64.whl"],
    ],
    ids=["x86_64 and sdist", "another python", "newer glibc", "macos"],
)
def test_a_requirement_without_a_wheel_for_the_function_fails_synth_with_one_line(
    requiring: Path, tmp_path: Path, files: list[str]
) -> None:
    for file in files:
        if file.endswith(".whl"):
            build_wheel(requiring, "fast", "1.0", file.removeprefix("fast-1.0-").removesuffix(".whl"))
        else:
            build_sdist(requiring, "fast", "1.0")
    with pytest.raises(DeclarationError) as raised:
        worker_package.stage_asset(tmp_path / "site")
    assert str(raised.value) == (
        "worker bundle: no wheel of 'fast==1.0' for CPython 3.14 on manylinux_2_34_aarch64 .. manylinux2014_aarch64 "
        f"in {requiring} (`make setup` downloads the worker requirements' wheels there); only such wheels can run "
        "in the function, so a distribution without one cannot be bundled"
    )


def test_a_dependency_without_a_wheel_is_the_one_named(requiring: Path, tmp_path: Path) -> None:
    build_wheel(requiring, "fast", "1.0", f"{LAMBDA_ABI}-manylinux2014_aarch64", requires=["slow"])
    build_sdist(requiring, "slow", "2.0")
    with pytest.raises(DeclarationError, match=r"^worker bundle: no wheel of 'slow' for CPython 3\.14 on "):
        worker_package.stage_asset(tmp_path / "site")


def test_a_synth_with_an_unbundlable_requirement_stops_with_that_line(requiring: Path) -> None:
    build_sdist(requiring, "fast", "1.0")
    with pytest.raises(DeclarationError, match=r"^worker bundle: no wheel of 'fast==1\.0' for CPython 3\.14 "):
        build_app(SMALL, topology_spec="tests.fixtures.small_topology:TOPOLOGY")


def test_the_hash_follows_the_requirements_wheels(
    requiring: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tag = f"{LAMBDA_ABI}-manylinux2014_aarch64"
    build_wheel(requiring, "fast", "1.0", tag)
    build_wheel(requiring, "fast", "1.1", tag)
    before = worker_package.asset_hash(worker_package.stage_asset(tmp_path / "first"))
    # The same requirements from the same wheels: the same asset.
    assert worker_package.asset_hash(worker_package.stage_asset(tmp_path / "again")) == before
    monkeypatch.setattr(worker_package, "worker_requirements", lambda: ["fast==1.1"])
    assert worker_package.asset_hash(worker_package.stage_asset(tmp_path / "bumped")) != before


def test_download_fetches_only_the_functions_wheels(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`make setup`'s step, through pip's configuration: here a local folder stands in for the index."""
    index = tmp_path / "index"
    wanted = build_wheel(index, "fast", "1.0", f"{LAMBDA_ABI}-manylinux2014_aarch64")
    build_wheel(index, "fast", "1.0", f"{LAMBDA_ABI}-manylinux2014_x86_64")
    build_sdist(index, "slow", "2.0")
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(index))
    wheelhouse = tmp_path / "wheelhouse"
    lambda_wheels.download(["fast==1.0"], wheelhouse, worker_package.PLATFORM)
    assert [path.name for path in wheelhouse.iterdir()] == [wanted.name]
    with pytest.raises(DeclarationError) as raised:
        lambda_wheels.download(["slow==2.0"], wheelhouse, worker_package.PLATFORM)
    assert str(raised.value).startswith(
        "worker bundle: no wheel of 'slow==2.0' for CPython 3.14 on manylinux_2_34_aarch64 .. manylinux2014_aarch64 "
        "on the package index (or the index could not be reached); "
    )


def test_download_from_an_index_that_cannot_be_reached_is_one_line_saying_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`make setup` offline: pip's retries end in one line that names the requirement and the unreachable index."""
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    for local_source in ("PIP_FIND_LINKS", "PIP_EXTRA_INDEX_URL"):
        monkeypatch.delenv(local_source, raising=False)
    monkeypatch.setenv("PIP_INDEX_URL", f"http://127.0.0.1:{free_port()}/simple")  # nothing listens there
    monkeypatch.setenv("PIP_RETRIES", "0")
    monkeypatch.setenv("PIP_NO_CACHE_DIR", "1")
    with pytest.raises(DeclarationError) as raised:
        lambda_wheels.download(["croniter==7.0.0"], tmp_path / "wheelhouse", worker_package.PLATFORM)
    message = str(raised.value)
    # croniter is installed here, so the installed-versions constraint pins it too: pip words that differently.
    assert message.startswith("worker bundle: no wheel of 'croniter' for CPython 3.14 on ")
    assert "(or the index could not be reached)" in message
    assert "\n" not in message


def test_the_wheels_are_chosen_for_the_functions_runtime_and_architecture() -> None:
    assert worker_package.PLATFORM.python_version == "3.14"
    assert worker_package.PLATFORM.platforms[::17] == ("manylinux_2_34_aarch64", "manylinux_2_17_aarch64")
    assert worker_package.PLATFORM.platforms[-1] == "manylinux2014_aarch64"
    other = lambda_wheels.LambdaPlatform.of(lambda_.Runtime.PYTHON_3_13, lambda_.Architecture.X86_64)
    assert other.python_version == "3.13"
    assert (other.platforms[0], other.platforms[-1]) == ("manylinux_2_34_x86_64", "manylinux2014_x86_64")


def test_the_bundle_imports_conveyor_schedules_with_only_what_lambda_provides(lambda_like: LambdaLike) -> None:
    result = lambda_like.run(IMPORT_CHECK)
    assert result.returncode == 0, result.stderr
    # 03:30 in Kyiv in July (summer time, UTC+3).
    assert result.stdout.strip() == "2026-07-01T00:30:00+00:00"


@pytest.mark.parametrize(
    ("entry_point", "function_environment"),
    [("functions.worker", WORKER_ENVIRONMENT), ("functions.relay", RELAY_ENVIRONMENT), ("functions.scale_on_age", {})],
    ids=["worker", "relay", "scale_on_age"],
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
