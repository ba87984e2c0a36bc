"""discover_jobs: every job a module of the jobs package declares, and one line naming the file when one cannot load."""

import importlib
import re
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from conveyor.contract.discovery import discover_jobs
from conveyor.contract.errors import DeclarationError
from functions.topology import TOPOLOGY

JOBS = Path(__file__).resolve().parents[3] / "functions" / "jobs"

GREET = """
from conveyor import JobContext, Payload, job

class Greet(Payload):
    name: str

@job(queue="default")
def {name}(payload: Greet, ctx: JobContext) -> None:
    ctx.logger.info("hello %s", payload.name)
"""

# A package of job modules on sys.path: (module name -> source, where PACKAGE stands for the package) in,
# the package's name out.
MakePackage = Callable[[dict[str, str]], str]


@pytest.fixture
def make_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[MakePackage]:
    """Packages under a fresh name each, on sys.path for the test, their modules forgotten after it."""
    monkeypatch.syspath_prepend(str(tmp_path))
    made: list[str] = []

    def make(modules: dict[str, str]) -> str:
        package = f"jobs_{uuid.uuid4().hex[:8]}"
        for name, source in {"__init__": "", **modules}.items():
            path = tmp_path / package / f"{name.replace('.', '/')}.py"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(source.replace("PACKAGE", package), encoding="utf-8")
        made.append(package)
        importlib.invalidate_caches()
        return package

    yield make
    for name in [name for name in sys.modules if name.split(".")[0] in made]:
        del sys.modules[name]


def test_the_project_topology_is_every_job_its_jobs_package_declares() -> None:
    modules = sorted(path.stem for path in JOBS.glob("*.py") if path.stem != "__init__")
    assert [job.name for job in TOPOLOGY.job_types] == [job.name for job in discover_jobs("functions.jobs")]
    assert sorted(job.handler.__module__.rsplit(".", 1)[1] for job in TOPOLOGY.job_types) == modules


def test_jobs_are_found_in_modules_and_subpackages_once_each(make_package: MakePackage) -> None:
    package = make_package(
        {
            "greet": GREET.format(name="greet"),
            "billing/__init__": "",
            "billing/invoice": GREET.format(name="send_invoice"),
            "reexport": "from PACKAGE.greet import greet\nNOT_A_JOB = 5\n",
        }
    )
    assert [job.name for job in discover_jobs(package)] == ["send_invoice", "greet"]


def test_a_module_that_fails_to_import_is_named_by_its_file(make_package: MakePackage) -> None:
    package = make_package({"greet": GREET.format(name="greet"), "broken": "import no_such_library\n"})
    broken = Path(sys.path[0]) / package / "broken.py"
    expected = f"{broken}: cannot import {package}.broken: ModuleNotFoundError: No module named 'no_such_library'"
    with pytest.raises(DeclarationError, match=f"^{re.escape(expected)}$"):
        discover_jobs(package)


def test_a_syntax_error_is_one_line_naming_the_file(make_package: MakePackage) -> None:
    package = make_package({"typo": "def broken(:\n"})
    with pytest.raises(DeclarationError) as raised:
        discover_jobs(package)
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith(f"{Path(sys.path[0]) / package / 'typo.py'}: cannot import {package}.typo: SyntaxError:")


def test_a_bad_declaration_is_named_by_its_file_and_its_rule(make_package: MakePackage) -> None:
    package = make_package({"shout": GREET.format(name="Shout")})
    with pytest.raises(DeclarationError, match=r"shout\.py: job jobs_\w+\.shout\.Shout: the function name 'Shout'"):
        discover_jobs(package)


def test_two_jobs_of_one_name_fail_naming_both_modules(make_package: MakePackage) -> None:
    package = make_package({"greet": GREET.format(name="greet"), "other": GREET.format(name="greet")})
    message = f"job type 'greet' is declared twice: in {package}.greet and in {package}.other"
    with pytest.raises(DeclarationError, match=f"^{re.escape(message)}$"):
        discover_jobs(package)


def test_a_package_that_does_not_exist_or_is_a_module_is_refused() -> None:
    with pytest.raises(DeclarationError, match=r"^jobs package 'no_such_jobs': cannot import no_such_jobs: Module"):
        discover_jobs("no_such_jobs")
    with pytest.raises(
        DeclarationError, match=r"^jobs package 'functions.topology' is a module \(.*\), not a package$"
    ):
        discover_jobs("functions.topology")
