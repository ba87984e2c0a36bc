"""`conveyor init DIR`: a new project from the installed package's templates, whose own tests pass as written."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli_support import conveyor
from tests.unit.worker.test_documented_job import MAX_LINES

ROOT = Path(__file__).resolve().parents[3]
# The generated project's tests, which start moto and the harness in a fresh interpreter.
TEST_RUN_TIMEOUT_S = 300
# A job a user adds to the generated project, and its test.
SECOND_JOB = """from conveyor import JobContext, Payload, job


class Receipt(Payload):
    order_id: str


@job(queue="default")
def send_receipt(payload: Receipt, ctx: JobContext) -> None:
    ctx.logger.info("receipt sent", extra={"order_id": payload.order_id})
"""
SECOND_JOB_TEST = """import conveyor.testing

from my_shop.jobs.send_receipt import Receipt, send_receipt


def test_a_receipt_is_sent():
    with conveyor.testing.run_jobs() as jobs:
        send_receipt.enqueue(Receipt(order_id="o-1"))
        jobs.drain()
        assert jobs.succeeded("send_receipt") == 1
"""
FILES = [
    "Makefile",
    "README.md",
    "my_shop/__init__.py",
    "my_shop/demo.py",
    "my_shop/jobs/__init__.py",
    "my_shop/jobs/send_welcome.py",
    "my_shop/topology.py",
    "pyproject.toml",
    "tests/test_send_welcome.py",
]


def written(directory: Path) -> list[str]:
    return sorted(str(path.relative_to(directory)) for path in directory.rglob("*") if path.is_file())


def test_init_writes_a_project_whose_own_tests_pass_and_takes_a_new_job_module_with_no_other_edit(
    tmp_path: Path,
) -> None:
    project = tmp_path / "my-shop"

    code, out, err = conveyor("init", str(project))

    assert (code, err) == (0, "")
    assert written(project) == FILES
    assert f"created {project / 'my_shop/topology.py'}" in out
    settings = (project / "pyproject.toml").read_text()
    assert 'topology = "my_shop.topology:TOPOLOGY"' in settings
    assert "{{" not in "".join((project / name).read_text() for name in FILES)
    assert len((project / "my_shop/jobs/send_welcome.py").read_text().splitlines()) <= MAX_LINES
    readme = (project / "README.md").read_text()
    assert "make test   # the tests" in readme
    assert "make demo   # a few jobs" in readme
    # A second job is its module and its test: the topology and the settings stay as written.
    (project / "my_shop/jobs/send_receipt.py").write_text(SECOND_JOB)
    (project / "tests/test_send_receipt.py").write_text(SECOND_JOB_TEST)
    # Outside this repository: no tests/conftest.py of ours, no AWS settings, only the library on the path.
    path_entries = [str(ROOT / "shared"), str(project)]
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        cwd=project,
        env={"PATH": os.environ["PATH"], "HOME": str(tmp_path), "PYTHONPATH": os.pathsep.join(path_entries)},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=TEST_RUN_TIMEOUT_S,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "3 passed" in result.stdout


def test_init_refuses_a_folder_that_is_not_empty_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine")

    code, out, err = conveyor("init", str(tmp_path))

    assert (code, out) == (1, "")
    assert err == f"conveyor: {tmp_path} is not empty: conveyor init writes only into a new or empty folder\n"
    assert written(tmp_path) == ["notes.txt"]


def test_init_refuses_a_folder_name_that_makes_no_package_name(tmp_path: Path) -> None:
    code, out, err = conveyor("init", str(tmp_path / "2026"))

    assert (code, out) == (1, "")
    assert err.startswith("conveyor: cannot name a Python package after the folder '2026'")
    assert err.count("\n") == 1
    assert not (tmp_path / "2026").exists()


@pytest.mark.parametrize(("folder", "package"), [("json", "json"), ("Conveyor", "conveyor"), ("tests", "tests")])
def test_init_refuses_a_package_name_that_another_module_has(tmp_path: Path, folder: str, package: str) -> None:
    code, out, err = conveyor("init", str(tmp_path / folder))

    assert (code, out) == (1, "")
    assert err == (
        f"conveyor: cannot name a Python package {package!r} after the folder {folder!r}: a module of that name "
        "exists already, and one of them would hide the other; use another folder name\n"
    )
    assert not (tmp_path / folder).exists()


def test_init_into_an_empty_folder_that_python_sees_as_a_namespace_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "shop").mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))

    assert conveyor("init", "shop")[0] == 0
    assert (tmp_path / "shop" / "shop" / "topology.py").is_file()
