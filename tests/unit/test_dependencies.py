"""Dependencies say what each side needs, pinned once, in pyproject.toml, and the rest agrees.

pyproject.toml's [project] dependencies are the runtime (the worker and the producer SDK); its
extras are what the other sides add (cli, local, testing, cdk, dev, bench). Every entry is pinned exactly
and a distribution has one pin; requirements.txt and requirements-dev.txt install the project
with extras (all but bench, which `make bench` installs) and pin nothing that disagrees. Each
side's third-party imports are installed for that side, every declared distribution is used by
the side that declares it, the Powertools pin is the release the layer version in cdk.json
packages, and the worker requirements the Lambda bundle installs are runtime dependencies.

The checks are functions of the files' contents, shown failing on drifting samples first, then
run on the project's own files.
"""

import ast
import importlib.metadata
import json
import re
import sys
import tomllib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from conveyor.contract.loader import worker_requirements

ROOT = Path(__file__).resolve().parents[2]
PROJECT = "conveyor"
RUNTIME = "dependencies"
REQUIREMENTS_FILES = ("requirements.txt", "requirements-dev.txt")

# The aws-lambda-powertools release each version of the public Powertools layer packages, for the
# layer the worker runs with (infra/worker_package.py: POWERTOOLS_LAYER_NAME). AWS publishes the
# pairing as the public SSM parameter /aws/service/powertools/python/arm64/python3.14/<release>,
# whose value is that release's layer version ARN. A new layer version in cdk.json needs its row
# here, and the aws-lambda-powertools pin in pyproject.toml moves with it.
POWERTOOLS_LAYER_RELEASES: dict[tuple[str, int], str] = {
    ("AWSLambdaPowertoolsPythonV3-python314-arm64", 36): "3.31.1",
}
POWERTOOLS = "aws-lambda-powertools"

# Where each group of dependencies is used: the code that group is installed for. The runtime
# group is what Lambda and a producer get; scenarios run in the local demo; tests in `make test`.
SIDES: dict[str, tuple[str, ...]] = {
    RUNTIME: (
        "shared/conveyor/__init__.py",
        "shared/conveyor/contract",
        "shared/conveyor/sdk",
        "shared/conveyor/worker",
        "shared/conveyor/ops",
        "functions",
    ),
    "cli": ("shared/conveyor/cli",),
    "local": ("shared/conveyor/local", "scenarios"),
    "testing": ("shared/conveyor/testing",),
    "cdk": ("infra", "app.py"),
    "dev": ("tests",),
    "bench": ("bench",),
}
# Extras requirements-dev.txt leaves out, with where they are installed instead. Where one is not
# installed, its side's checks, which read installed distributions, are skipped.
NOT_IN_DEV = {"bench": "`make bench` installs it (Makefile: $(BENCH_STAMP)); `make test` runs without Celery"}
# Declared, and used without being imported.
NOT_IMPORTED = {
    "tzdata": "zoneinfo reads its time zone data where the system has none",
    "pytest-xdist": "a pytest plugin, loaded by the Makefile's `pytest -n auto`",
}

_REQUIREMENT = re.compile(
    r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[(?P<extras>[^\]]*)\])?\s*(?:==\s*(?P<version>[^\s;,]+))?$"
)
_PROJECT_ITSELF = re.compile(r"^(?:-e\s+|--editable\s+)?\.(?:\[(?P<extras>[^\]]*)\])?$")
_EXTRA_MARKER = re.compile(r"""extra\s*==\s*["']([^"']+)["']""")


def normalize(name: str) -> str:
    """A distribution or extra name as PEP 503 / PEP 685 compare them."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _extras(text: str | None) -> frozenset[str]:
    return frozenset(normalize(extra) for extra in (text or "").split(",") if extra.strip())


@dataclass(frozen=True)
class Pin:
    """One requirement of pyproject.toml: ``name[extras]==version`` (no version: not pinned)."""

    name: str
    extras: frozenset[str]
    version: str | None
    group: str
    text: str

    @property
    def is_project(self) -> bool:
        """The project itself with extras (``conveyor[cli]``): an extra that includes others."""
        return self.name == PROJECT


@dataclass(frozen=True)
class Declared:
    """A [project] table's requirements: the runtime group and one group per extra."""

    pins: tuple[Pin, ...]
    groups: frozenset[str]

    @property
    def extras(self) -> frozenset[str]:
        return self.groups - {RUNTIME}

    def installed_groups(self, extras: Iterable[str]) -> set[str]:
        """The groups installing the project with ``extras`` brings: the runtime, the extras, and theirs."""
        groups = {RUNTIME}
        pending = [normalize(extra) for extra in extras]
        while pending:
            group = pending.pop()
            if group not in groups:
                groups.add(group)
                pending.extend(
                    extra for pin in self.pins if pin.group == group and pin.is_project for extra in pin.extras
                )
        return groups

    def installed(self, extras: Iterable[str]) -> dict[str, Pin]:
        """The third-party pins installing the project with ``extras`` brings, by distribution."""
        groups = self.installed_groups(extras)
        return {pin.name: pin for pin in self.pins if pin.group in groups and not pin.is_project}


def parse_project(project: Mapping[str, Any]) -> tuple[Declared, list[str]]:
    """The requirements of a [project] table, and the entries not in the one allowed form."""
    entries: dict[str, list[str]] = {RUNTIME: list(project.get(RUNTIME, []))}
    entries.update({normalize(extra): list(items) for extra, items in project.get("optional-dependencies", {}).items()})
    pins: list[Pin] = []
    problems: list[str] = []
    for group, texts in entries.items():
        for text in texts:
            match = _REQUIREMENT.match(text.strip())
            if match is None:
                problems.append(f"{group}: {text!r} is not name[extras]==version")
            else:
                pins.append(
                    Pin(normalize(match["name"]), _extras(match["extras"]), match["version"], group, text.strip())
                )
    return Declared(tuple(pins), frozenset(entries)), problems


def pin_problems(declared: Declared) -> list[str]:
    """Entries not pinned exactly, the project naming an extra it lacks, and a distribution with two pins."""
    problems: list[str] = []
    first: dict[str, Pin] = {}
    for pin in declared.pins:
        if pin.is_project:
            problems.extend(
                f"{pin.group}: {pin.text!r} names extra {extra!r}, which pyproject.toml does not declare"
                for extra in sorted(pin.extras - declared.extras)
            )
            if pin.version is not None:
                problems.append(f"{pin.group}: {pin.text!r} pins the project itself")
        elif pin.version is None:
            problems.append(f"{pin.group}: {pin.name} is not pinned with == ({pin.text!r})")
        elif (seen := first.setdefault(pin.name, pin)).version != pin.version:
            problems.append(
                f"{pin.name} is pinned twice: =={seen.version} in {seen.group}, =={pin.version} in {pin.group}"
            )
    return problems


def requirements_drift(declared: Declared, files: Mapping[str, str], start: str) -> tuple[list[str], set[str]]:
    """Where requirements file ``start`` (and what it includes, from ``files``) disagrees with pyproject.toml.

    Returns the disagreements, each naming the package, and the extras the file installs the
    project with. A file may install the project (``-e .[extras]``), include another file
    (``-r``), or name a distribution exactly as pyproject.toml pins it; nothing else.
    """
    by_name = {pin.name: pin for pin in declared.pins if not pin.is_project and pin.version is not None}
    problems: list[str] = []
    extras: set[str] = set()
    reading: list[str] = []

    def read(name: str) -> None:
        if name in reading:
            problems.append(f"{reading[-1]}: includes {name} again")
            return
        if name not in files:
            problems.append(f"{reading[-1] if reading else name}: includes {name}, which does not exist")
            return
        reading.append(name)
        for raw in files[name].splitlines():
            line = raw.split(" #", 1)[0].strip()
            if not line or line.startswith("#"):
                continue
            if line.startswith(("-r ", "--requirement ")):
                read(line.split(None, 1)[1])
            elif (project := _PROJECT_ITSELF.match(line)) is not None:
                named = _extras(project["extras"])
                problems.extend(
                    f"{name}: installs the project with extra {extra!r}, which pyproject.toml does not declare"
                    for extra in sorted(named - declared.extras)
                )
                extras.update(named & declared.extras)
            elif (requirement := _REQUIREMENT.match(line)) is not None:
                package, version = normalize(requirement["name"]), requirement["version"]
                pinned = by_name.get(package)
                if pinned is None:
                    problems.append(f"{name}: {package} is not in pyproject.toml; add it there ({line!r})")
                elif version != pinned.version:
                    problems.append(
                        f"{name}: {package} is {line!r} but pyproject.toml pins {package}=={pinned.version}"
                    )
            else:
                problems.append(f"{name}: {line!r} is neither the project, an include, nor an exact pin")
        reading.pop()

    read(start)
    return problems, extras


def powertools_mismatch(layer: str, layer_version: int, pin: str | None) -> str | None:
    """Why the aws-lambda-powertools pin is not the release of the worker's layer, if it is not."""
    release = POWERTOOLS_LAYER_RELEASES.get((layer, layer_version))
    if release is None:
        return (
            f"cdk.json pins layer {layer}:{layer_version}, whose aws-lambda-powertools release "
            "POWERTOOLS_LAYER_RELEASES does not know: look it up (the public SSM parameter "
            "/aws/service/powertools/python/<arch>/<python>/<release> names each release's layer) and add it"
        )
    if pin != release:
        return (
            f"pyproject.toml pins {POWERTOOLS}=={pin} but layer {layer}:{layer_version} (cdk.json) "
            f"packages {release}: the worker would run another release than tests and producers"
        )
    return None


def _first_party(module: str) -> bool:
    """The library, or a top-level package or module of the repository (functions, infra, tests, ...)."""
    return module == PROJECT or (ROOT / module / "__init__.py").is_file() or (ROOT / f"{module}.py").is_file()


def _python_files(paths: Iterable[str]) -> Iterator[Path]:
    for relative in paths:
        path = ROOT / relative
        yield from [path] if path.is_file() else sorted(path.rglob("*.py"))


def third_party_imports(paths: Iterable[str]) -> dict[str, str]:
    """Top-level modules the code under ``paths`` imports, neither stdlib nor the project's, with a file each."""
    imported: dict[str, str] = {}
    for path in _python_files(paths):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.partition(".")[0]
                if top not in sys.stdlib_module_names and not _first_party(top):
                    imported.setdefault(top, str(path.relative_to(ROOT)))
    return imported


def _installed(distribution: str) -> importlib.metadata.Distribution:
    try:
        return importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError:
        raise AssertionError(
            f"{distribution} is declared in pyproject.toml but not installed here: pip install -r requirements-dev.txt"
        ) from None


def _requirements_of(distribution: str, extras: frozenset[str]) -> set[str]:
    """The distributions an installed distribution requires, with ``extras``."""
    names: set[str] = set()
    for requirement in _installed(distribution).requires or []:
        needs = {normalize(extra) for extra in _EXTRA_MARKER.findall(requirement)}
        if not needs or needs & extras:
            match = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement)
            assert match is not None, requirement
            names.add(normalize(match[0]))
    return names


def _commands(distribution: str) -> set[str]:
    """The commands a distribution installs: its console scripts, and executables it puts in bin/."""
    found = _installed(distribution)
    scripts = {entry.name for entry in found.entry_points if entry.group == "console_scripts"}
    return scripts | {file.name for file in found.files or [] if file.parent.name == "bin"}


def _modules_by_distribution() -> dict[str, set[str]]:
    modules: dict[str, set[str]] = {}
    for module, names in importlib.metadata.packages_distributions().items():
        for name in names:
            modules.setdefault(normalize(name), set()).add(module)
    return modules


def _module_constant(path: Path, name: str) -> Any:
    """A module-level constant's literal value, read without importing the module."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError(f"{path.relative_to(ROOT)} assigns no {name}")


def _skip_unless_installed(group: str) -> None:
    """Skip a side's checks of installed distributions where its extra, not in dev, is not installed."""
    if group not in NOT_IN_DEV:
        return
    absent = []
    for pin in _declared().installed([group]).values():
        try:
            importlib.metadata.distribution(pin.name)
        except importlib.metadata.PackageNotFoundError:
            absent.append(pin.name)
    if absent:
        pytest.skip(f"the {group} extra is not installed here ({', '.join(sorted(absent))}): {NOT_IN_DEV[group]}")


def _parsed(project: Mapping[str, Any]) -> Declared:
    declared, problems = parse_project(project)
    assert not problems, "\n".join(problems)
    return declared


def _declared() -> Declared:
    return _parsed(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"])


def _requirement_files() -> dict[str, str]:
    return {name: (ROOT / name).read_text() for name in REQUIREMENTS_FILES}


# --- the checks on drifting samples ---------------------------------------------------------

SAMPLE = {
    RUNTIME: ["boto3==1.44.5"],
    "optional-dependencies": {"cli": ["click==8.5.1"], "dev": ["conveyor[cli]", "pytest==9.2.0"]},
}


def test_a_requirements_file_pinning_another_version_is_named() -> None:
    files = {"requirements.txt": "-e .[cli]\nboto3==1.40.0\n"}

    problems, extras = requirements_drift(_parsed(SAMPLE), files, "requirements.txt")

    assert problems == ["requirements.txt: boto3 is 'boto3==1.40.0' but pyproject.toml pins boto3==1.44.5"]
    assert extras == {"cli"}


def test_a_requirements_file_naming_what_pyproject_lacks_is_named() -> None:
    files = {"requirements-dev.txt": "-r requirements.txt\n-e .[dev,docs]\n", "requirements.txt": "moto==5.2.5\n"}

    problems, extras = requirements_drift(_parsed(SAMPLE), files, "requirements-dev.txt")

    assert problems == [
        "requirements.txt: moto is not in pyproject.toml; add it there ('moto==5.2.5')",
        "requirements-dev.txt: installs the project with extra 'docs', which pyproject.toml does not declare",
    ]
    assert extras == {"dev"}


def test_an_unpinned_or_twice_pinned_dependency_is_named() -> None:
    project = {
        RUNTIME: ["boto3>=1.40", "pydantic"],
        "optional-dependencies": {"cli": ["click==8.5.1"], "dev": ["click==8.4.0", "conveyor[cli,docs]"]},
    }

    declared, problems = parse_project(project)

    assert problems == ["dependencies: 'boto3>=1.40' is not name[extras]==version"]
    assert pin_problems(declared) == [
        "dependencies: pydantic is not pinned with == ('pydantic')",
        "click is pinned twice: ==8.5.1 in cli, ==8.4.0 in dev",
        "dev: 'conveyor[cli,docs]' names extra 'docs', which pyproject.toml does not declare",
    ]


def test_extras_bring_the_extras_they_name() -> None:
    declared = _parsed(SAMPLE)

    assert set(declared.installed([])) == {"boto3"}
    assert set(declared.installed(["dev"])) == {"boto3", "click", "pytest"}


def test_a_powertools_pin_other_than_the_layers_release_is_named() -> None:
    ((layer, version), release) = next(iter(POWERTOOLS_LAYER_RELEASES.items()))

    assert powertools_mismatch(layer, version, release) is None
    assert f"pins {POWERTOOLS}==0.0.1 but" in (powertools_mismatch(layer, version, "0.0.1") or "")
    assert "does not know" in (powertools_mismatch(layer, version + 1000, release) or "")


# --- the project's own files -----------------------------------------------------------------


def test_every_dependency_is_pinned_exactly_once() -> None:
    problems = pin_problems(_declared())

    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("name", REQUIREMENTS_FILES)
def test_requirements_files_agree_with_pyproject(name: str) -> None:
    problems, extras = requirements_drift(_declared(), _requirement_files(), name)

    assert not problems, "\n".join(problems)
    assert extras, f"{name} does not install the project (-e .[extras])"


def test_requirements_dev_installs_every_group() -> None:
    """`make test` and `make demo` install requirements-dev.txt: every pinned distribution."""
    declared = _declared()
    _, extras = requirements_drift(declared, _requirement_files(), "requirements-dev.txt")

    missing = declared.groups - declared.installed_groups(extras) - set(NOT_IN_DEV)

    assert not missing, f"requirements-dev.txt does not install the extras {sorted(missing)}"


def test_the_powertools_pin_is_the_release_of_the_layer_in_cdk_json() -> None:
    context_key = _module_constant(ROOT / "infra" / "app.py", "POWERTOOLS_LAYER_CONTEXT")
    layer = _module_constant(ROOT / "infra" / "worker_package.py", "POWERTOOLS_LAYER_NAME")
    layer_version = json.loads((ROOT / "cdk.json").read_text())["context"][context_key]
    runtime = _declared().installed([])
    assert POWERTOOLS in runtime, f"{POWERTOOLS} is not a runtime dependency"

    mismatch = powertools_mismatch(layer, layer_version, runtime[POWERTOOLS].version)

    assert mismatch is None, mismatch


def test_the_worker_requirements_are_runtime_dependencies() -> None:
    """The bundle ships each at the version installed here: the runtime group must pin it (infra/worker_package.py)."""
    runtime = _declared().installed([])
    names = worker_requirements(ROOT / "pyproject.toml")
    assert names, "pyproject.toml names no [tool.conveyor] worker-requirements"

    unpinned = [name for name in names if normalize(name) not in runtime]

    assert not unpinned, f"worker requirements not in pyproject.toml's [project] dependencies: {unpinned}"


@pytest.mark.parametrize("group", SIDES)
def test_each_sides_imports_are_installed_for_it(group: str) -> None:
    """What a side imports is a distribution its install declares, or one such a distribution requires."""
    _skip_unless_installed(group)
    declared = _declared().installed([] if group == RUNTIME else [group])
    provided = set(declared)
    for pin in declared.values():
        provided |= _requirements_of(pin.name, pin.extras)
    distributions = importlib.metadata.packages_distributions()

    uncovered = {
        module: f"{where} (from {distributions.get(module, ['no installed distribution'])})"
        for module, where in third_party_imports(SIDES[group]).items()
        if not {normalize(name) for name in distributions.get(module, [])} & provided
    }

    assert not uncovered, f"{group}: imports not installed for this side: {uncovered}"


@pytest.mark.parametrize("group", SIDES)
def test_each_declared_distribution_is_used_by_its_side(group: str) -> None:
    """Imported by the side, run by the Makefile (a command or `python -m`), or typing a declared one."""
    _skip_unless_installed(group)
    declared = _declared()
    everything = declared.installed(declared.extras)
    imported = set(third_party_imports(SIDES[group]))
    makefile = (ROOT / "Makefile").read_text()
    modules = _modules_by_distribution()

    def used(name: str) -> bool:
        if modules.get(name, set()) & imported or name in NOT_IMPORTED:
            return True
        if any(f"$(BIN)/{command} " in makefile or f"$(BIN)/{command}\n" in makefile for command in _commands(name)):
            return True
        if any(f" -m {module} " in makefile for module in modules.get(name, set())):
            return True
        typed = re.sub(r"^types-|-stubs$", "", name)
        return typed != name and typed in everything

    unused = [pin.text for pin in declared.pins if pin.group == group and not pin.is_project and not used(pin.name)]

    assert not unused, f"{group}: declared, but not used by {', '.join(SIDES[group])}: {unused}"
