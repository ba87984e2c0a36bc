"""`conveyor init DIR`: a new project from the installed package's templates, whose own tests pass as written."""

import os
import subprocess
import sys
from pathlib import Path

from tests.cli_support import conveyor

ROOT = Path(__file__).resolve().parents[3]
# The generated project's tests, which start moto and the harness in a fresh interpreter.
TEST_RUN_TIMEOUT_S = 300
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


def test_init_writes_a_project_whose_own_tests_pass(tmp_path: Path) -> None:
    project = tmp_path / "my-shop"

    code, out, err = conveyor("init", str(project))

    assert (code, err) == (0, "")
    assert written(project) == FILES
    assert f"created {project / 'my_shop/topology.py'}" in out
    settings = (project / "pyproject.toml").read_text()
    assert 'topology = "my_shop.topology:TOPOLOGY"' in settings
    assert "{{" not in "".join((project / name).read_text() for name in FILES)
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
    assert "2 passed" in result.stdout


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
