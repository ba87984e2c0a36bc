"""The wheel, installed with its runtime dependencies only, is a working producer SDK.

The wheel is built from the checkout as `make dist` builds it (sdist, then the wheel from the
sdist), installed into a fresh venv outside the checkout with pip and the runtime dependencies
pyproject.toml pins (from the configured package index), and used there: `import conveyor.sdk`
loads none of the other sides' dependencies, and `JobClient.from_schema` enqueues to this
process's embedded AWS from the committed JSON Schema alone, refusing a bad payload before
anything is sent.

Nothing here skips unless the package index cannot be reached (pip cannot fetch a pinned
runtime dependency): then the skip says so, with pip's output.
"""

import json
import os
import subprocess
import sys
import tomllib
import zipfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest

from conveyor.contract.envelope import parse_envelope
from conveyor.local.embedded import LOOPBACK, REGION, EmbeddedAws, free_port
from conveyor.local.provision import provision
from conveyor.local.runtime import local_environment
from functions.topology import TOPOLOGY
from tests.e2e.conftest import ROOT

SCHEMA = ROOT / "docs" / "schema" / "envelope.schema.json"
JOB_TYPE = "send_welcome_email"
QUEUE = "default"
PREFIX = "wheel"
# The other sides' dependencies: a producer installing the SDK gets none of them.
OTHER_SIDES = ("moto", "click", "aws_cdk", "cdk_nag")
# What the SDK imports only when a client is made from the schema (JobClient.from_schema).
LAZY = ("jsonschema",)
BUILD_TIMEOUT_S = 600.0
INSTALL_TIMEOUT_S = 900.0
RUN_TIMEOUT_S = 120.0
OUTPUT_TAIL_CHARS = 3000
# One xdist worker runs this module, so the module's one build is the only one: two builds of the
# checkout at once race on the sdist's staging directory setuptools makes inside it (conveyor-<version>/).
pytestmark = pytest.mark.xdist_group("wheel-build")

# Run in the fresh venv: a producer outside the project, with the SDK and the schema only.
PRODUCER = """
import json, sys
from conveyor.contract.errors import InvalidJobError
from conveyor.sdk import JobClient

schema, prefix, job_type, payload = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
client = JobClient.from_schema(schema, prefix=prefix)
try:
    job_id = client.enqueue(job_type, payload)
except InvalidJobError as error:
    print(json.dumps({"refused": str(error)}))
else:
    print(json.dumps({"job_id": job_id}))
"""

IMPORTS = """
import importlib.util, json, sys
import conveyor, conveyor.sdk
watched = json.loads(sys.argv[1])
print(json.dumps({
    "conveyor": conveyor.__file__,
    "loaded": sorted(set(sys.modules) & set(watched)),
    "installed": sorted(name for name in watched if importlib.util.find_spec(name) is not None),
}))
"""


@dataclass(frozen=True)
class FreshVenv:
    wheel: Path
    root: Path

    @property
    def python(self) -> Path:
        return self.root / "bin" / "python"

    def run(self, script: str, *argv: str, env: dict[str, str], cwd: Path) -> Any:
        """Run ``script`` with the venv's interpreter; its one line of JSON output, parsed."""
        result = subprocess.run(
            [str(self.python), "-c", script, *argv],
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT_S,
            check=False,
        )
        assert result.returncode == 0, f"exit {result.returncode}\n{_tail(result)}"
        return json.loads(result.stdout)


def _tail(result: "subprocess.CompletedProcess[str]") -> str:
    return f"stderr:\n{result.stderr[-OUTPUT_TAIL_CHARS:]}\nstdout:\n{result.stdout[-OUTPUT_TAIL_CHARS:]}"


def _run(command: Sequence[str], *, cwd: Path, timeout_s: float) -> "subprocess.CompletedProcess[str]":
    """``command`` without this process's PYTHONPATH: pip would take the checkout's conveyor on it as installed."""
    environment = {name: value for name, value in os.environ.items() if name != "PYTHONPATH"}
    try:
        return subprocess.run(
            list(command),
            cwd=cwd,
            env=environment,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
    except subprocess.TimeoutExpired as error:
        output = (error.stderr or b"").decode(errors="replace") if isinstance(error.stderr, bytes) else error.stderr
        return subprocess.CompletedProcess(list(command), returncode=-1, stdout="", stderr=f"timed out\n{output}")


def _runtime_pin(name: str) -> str:
    dependencies: list[str] = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    return next(pin for pin in dependencies if pin.startswith(name))


def _fail_unless_index_unreachable(what: str, result: "subprocess.CompletedProcess[str]", scratch: Path) -> None:
    """``what`` failed: skip if pip cannot fetch a pinned runtime dependency at all, else fail with its output."""
    pin = _runtime_pin("aws-lambda-powertools")
    probe = _run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--dest", str(scratch / "probe"), pin],
        cwd=scratch,
        timeout_s=INSTALL_TIMEOUT_S,
    )
    if probe.returncode != 0:
        pytest.skip(f"the package index is unreachable (pip cannot download {pin}), so {what} failed:\n{_tail(probe)}")
    pytest.fail(f"{what} failed, though the package index answers:\n{_tail(result)}")


@pytest.fixture(scope="module")
def fresh_venv(tmp_path_factory: pytest.TempPathFactory) -> FreshVenv:
    """The wheel built from the checkout, installed with its runtime dependencies into a new venv elsewhere."""
    scratch = tmp_path_factory.mktemp("wheel")
    assert not scratch.resolve().is_relative_to(ROOT), f"{scratch} is inside the checkout"
    dist = scratch / "dist"
    build = _run(
        [sys.executable, "-m", "build", "--outdir", str(dist), str(ROOT)], cwd=scratch, timeout_s=BUILD_TIMEOUT_S
    )
    if build.returncode != 0:
        _fail_unless_index_unreachable("building the wheel", build, scratch)
    (wheel,) = dist.glob("conveyor-*.whl")

    venv = FreshVenv(wheel=wheel, root=scratch / "venv")
    # No pip in the venv: this interpreter's pip installs into it (--python), one install fewer.
    created = _run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv.root)], cwd=scratch, timeout_s=RUN_TIMEOUT_S
    )
    assert created.returncode == 0, _tail(created)
    install = _run(
        [sys.executable, "-m", "pip", "--python", str(venv.python), "install", "--quiet", str(wheel)],
        cwd=scratch,
        timeout_s=INSTALL_TIMEOUT_S,
    )
    if install.returncode != 0:
        _fail_unless_index_unreachable("installing the wheel", install, scratch)
    return venv


def _bare_environment(**extra: str) -> dict[str, str]:
    """A producer's environment: nothing of the checkout on the path, no venv of this process."""
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/"), **extra}


@dataclass(frozen=True)
class Embedded:
    endpoint: str
    sqs: Any
    queue_url: str


@pytest.fixture
def embedded() -> Iterator[Embedded]:
    """This process's embedded AWS with the project's queues and tables, named with PREFIX."""
    server = EmbeddedAws(free_port())
    server.start()
    try:
        sqs = boto3.client("sqs", endpoint_url=server.endpoint_url, region_name=REGION)
        dynamodb = boto3.client("dynamodb", endpoint_url=server.endpoint_url, region_name=REGION)
        provisioned = provision(TOPOLOGY, sqs=sqs, dynamodb=dynamodb, prefix=PREFIX)
        yield Embedded(endpoint=server.endpoint_url, sqs=sqs, queue_url=provisioned.queues[QUEUE].url)
    finally:
        server.stop()


def _receive_all(sqs: Any, url: str) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    while batch := sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=300).get("Messages", []):
        messages.extend(batch)
    return messages


def _produce(venv: FreshVenv, embedded: Embedded, payload: dict[str, Any], cwd: Path) -> dict[str, str]:
    environment = _bare_environment(
        **local_environment(embedded.endpoint), NO_PROXY=f"{LOOPBACK},localhost", no_proxy=f"{LOOPBACK},localhost"
    )
    result: dict[str, str] = venv.run(
        PRODUCER, str(SCHEMA), PREFIX, JOB_TYPE, json.dumps(payload), env=environment, cwd=cwd
    )
    return result


def test_the_wheel_holds_the_library_and_the_conveyor_command(fresh_venv: FreshVenv) -> None:
    with zipfile.ZipFile(fresh_venv.wheel) as wheel:
        names = wheel.namelist()
        info = next(name.rpartition("/")[0] for name in names if name.endswith(".dist-info/METADATA"))
        entry_points = wheel.read(f"{info}/entry_points.txt").decode()

    assert {name.partition("/")[0] for name in names} == {"conveyor", info}
    assert entry_points.split() == ["[console_scripts]", "conveyor", "=", "conveyor.cli.main:main"]
    # `conveyor init`'s templates, every one (package data).
    templates = ROOT / "shared" / "conveyor" / "cli" / "templates"
    shipped = {name for name in names if name.startswith("conveyor/cli/templates/")}
    assert shipped == {f"conveyor/cli/templates/{path.relative_to(templates)}" for path in templates.rglob("*.tmpl")}


def test_the_sdk_imports_no_other_sides_dependencies(fresh_venv: FreshVenv, tmp_path: Path) -> None:
    watched = [*OTHER_SIDES, *LAZY]

    found = fresh_venv.run(IMPORTS, json.dumps(watched), env=_bare_environment(), cwd=tmp_path)

    assert Path(found["conveyor"]).is_relative_to(fresh_venv.root), f"conveyor came from {found['conveyor']}"
    assert found["loaded"] == [], f"`import conveyor.sdk` loaded {found['loaded']}"
    assert found["installed"] == list(LAZY), "the runtime dependencies installed other sides' packages"


def test_a_producer_enqueues_from_the_schema_with_the_wheel(
    fresh_venv: FreshVenv, embedded: Embedded, tmp_path: Path
) -> None:
    payload = {"user_id": "u-42", "locale": "de"}

    produced = _produce(fresh_venv, embedded, payload, tmp_path)

    assert "job_id" in produced, produced
    (message,) = _receive_all(embedded.sqs, embedded.queue_url)
    envelope = parse_envelope(message["Body"])
    assert (envelope.id, envelope.type, envelope.data) == (produced["job_id"], JOB_TYPE, payload)


def test_a_bad_payload_is_refused_naming_the_field_and_nothing_is_sent(
    fresh_venv: FreshVenv, embedded: Embedded, tmp_path: Path
) -> None:
    produced = _produce(fresh_venv, embedded, {"user_id": 42}, tmp_path)

    assert "refused" in produced, f"the bad payload was not refused: {produced}"
    assert "user_id" in produced["refused"], produced["refused"]
    assert _receive_all(embedded.sqs, embedded.queue_url) == []
