"""The topology is found by an explicit setting: argument, then environment, then [tool.conveyor]; never a default.

[tool.conveyor] also names the worker requirements, the distributions the Lambda bundle installs.
"""

import os
import sys
from pathlib import Path

import pytest

from conveyor.contract.errors import DeclarationError
from conveyor.contract.loader import TOPOLOGY_ENV, load_topology, topology_spec, worker_requirements
from functions.topology import TOPOLOGY
from tests.cli_support import conveyor

TOPOLOGY_MODULE = """
from datetime import timedelta
from conveyor.contract.declarations import Queue
from conveyor.contract.topology import Topology

TOPOLOGY = Topology(queues=(Queue("{queue}", age_objective=timedelta(minutes=1)),))
"""


@pytest.fixture
def elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working directory outside this repository, with no setting in the environment."""
    monkeypatch.delenv(TOPOLOGY_ENV, raising=False)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def project(
    root: Path, module: str, queue: str, table: str = '[tool.conveyor]\ntopology = "{module}:TOPOLOGY"\n'
) -> None:
    """A project at ``root``: a pyproject.toml and a topology module beside it."""
    (root / "pyproject.toml").write_text('[project]\nname = "shop"\n\n' + table.format(module=module))
    (root / f"{module}.py").write_text(TOPOLOGY_MODULE.format(queue=queue))


def test_nothing_set_fails_in_one_line_naming_every_way_to_set_it(elsewhere: Path) -> None:
    with pytest.raises(DeclarationError) as raised:
        load_topology()
    message = str(raised.value)
    assert "\n" not in message
    assert message == (
        "no topology set: pass --topology, set CONVEYOR_TOPOLOGY=module:attribute, or add "
        'topology = "module:attribute" under [tool.conveyor] in pyproject.toml '
        f"(no pyproject.toml from {elsewhere.resolve()} up)"
    )


def test_a_pyproject_without_the_setting_is_named(elsewhere: Path) -> None:
    (elsewhere / "pyproject.toml").write_text('[project]\nname = "shop"\n')
    with pytest.raises(DeclarationError, match=r"\(.*pyproject\.toml sets none\)$"):
        topology_spec()


def test_the_nearest_pyproject_names_the_topology_from_any_subdirectory(elsewhere: Path) -> None:
    project(elsewhere, "shop_topology_a", "orders")
    nested = elsewhere / "src" / "deep"
    nested.mkdir(parents=True)
    os.chdir(nested)  # monkeypatch.chdir in the fixture restores the working directory
    # A nearer pyproject.toml is the project's, even without the setting: a parent's never leaks in.
    (nested.parent / "pyproject.toml").write_text("[tool.black]\n")
    with pytest.raises(DeclarationError, match=r"src/pyproject\.toml sets none"):
        load_topology()
    (nested.parent / "pyproject.toml").unlink()
    topology = load_topology()
    assert [queue.name for queue in topology.queues] == ["orders"]


def test_environment_overrides_pyproject_and_the_argument_overrides_both(
    elsewhere: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project(elsewhere, "shop_topology_b", "from-pyproject")
    assert topology_spec() == "shop_topology_b:TOPOLOGY"
    monkeypatch.setenv(TOPOLOGY_ENV, "functions.topology:TOPOLOGY")
    assert load_topology() is TOPOLOGY
    assert topology_spec("shop_topology_b:TOPOLOGY") == "shop_topology_b:TOPOLOGY"


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ("[tool.conveyor]\ntopology = 3\n", "[tool.conveyor] topology must be a 'module:attribute' string"),
        ("[tool.conveyor\n", "pyproject.toml: not valid TOML"),
        ('[tool.conveyor]\ntopology = "{module}"\n', "expected 'module:attribute'"),
        ('[tool.conveyor]\ntopology = "{module}:QUEUES"\n', "has no attribute 'QUEUES'"),
        ('[tool.conveyor]\ntopology = "nowhere_at_all:TOPOLOGY"\n', "cannot import 'nowhere_at_all'"),
    ],
)
def test_a_wrong_setting_fails_naming_what_it_found(elsewhere: Path, table: str, message: str) -> None:
    project(elsewhere, "shop_topology_c", "orders", table)
    with pytest.raises(DeclarationError) as raised:
        load_topology()
    assert message in str(raised.value)
    assert "\n" not in str(raised.value)


def test_the_cli_says_so_in_one_line_and_exits_non_zero(elsewhere: Path) -> None:
    code, out, err = conveyor("topology")
    assert (code, out) == (1, "")
    assert err.startswith("conveyor: no topology set: pass --topology, set CONVEYOR_TOPOLOGY=")
    assert err.count("\n") == 1


def test_worker_requirements_are_the_names_listed_or_none(tmp_path: Path) -> None:
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[tool.conveyor]\ntopology = "shop:TOPOLOGY"\n')
    assert worker_requirements(pyproject) == ()
    pyproject.write_text('[tool.conveyor]\nworker-requirements = ["orjson", "ruamel.yaml", "typing_extensions"]\n')
    assert worker_requirements(pyproject) == ("orjson", "ruamel.yaml", "typing_extensions")


@pytest.mark.parametrize(
    "value", ['"orjson"', '["orjson==3.11.4"]', '["orjson[all]"]', '["orjson", 3]', '[""]'], ids=repr
)
def test_worker_requirements_other_than_a_list_of_names_fail_in_one_line(tmp_path: Path, value: str) -> None:
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(f"[tool.conveyor]\nworker-requirements = {value}\n")
    with pytest.raises(DeclarationError) as raised:
        worker_requirements(pyproject)
    assert str(raised.value).startswith(
        f"{pyproject}: [tool.conveyor] worker-requirements must be a list of distribution names "
        "(no versions: they are pinned in [project] dependencies), not "
    )
    assert "\n" not in str(raised.value)
