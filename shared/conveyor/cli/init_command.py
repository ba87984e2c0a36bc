"""`conveyor init [DIR]`: a new project, from the templates the package ships (conveyor/cli/templates/project).

Each template file ends in ``.tmpl`` (so no tool reads it as the library's own code) and names the
project as ``{{project}}``, its Python package as ``{{package}}``, and the installed Conveyor's
version as ``{{conveyor_version}}``; the folder ``package`` becomes the project's package.
"""

import importlib.metadata
import importlib.util
import keyword
import re
from importlib.resources import files
from importlib.resources.abc import Traversable
from pathlib import Path

import click

TEMPLATES = files("conveyor.cli") / "templates" / "project"
SUFFIX = ".tmpl"
PACKAGE_FOLDER = "package"
# Where the project's tests go (templates/project/tests): no package may take its name.
TESTS_FOLDER = "tests"
DISTRIBUTION = "conveyor"


def package_name(directory: Path) -> str:
    """The Python package a project in ``directory`` gets: its folder's name, lower case, ``_`` for the rest.

    Not a name Python already finds (``conveyor``, ``json``) nor the project's own ``tests``: the
    package would hide that module, or share the tests' folder.
    """
    folder = directory.resolve().name
    name = re.sub(r"\W+", "_", folder.lower()).strip("_")
    if not name.isidentifier() or keyword.iskeyword(name):
        raise click.ClickException(
            f"cannot name a Python package after the folder {folder!r}: use a folder name that starts with a letter"
        )
    spec = importlib.util.find_spec(name)
    # A namespace package (a bare folder, such as an empty DIR under the current one) hides nothing.
    if name == TESTS_FOLDER or (spec is not None and spec.origin is not None):
        raise click.ClickException(
            f"cannot name a Python package {name!r} after the folder {folder!r}: a module of that name exists "
            "already, and one of them would hide the other; use another folder name"
        )
    return name


def _files(folder: Traversable, relative: Path) -> list[tuple[Path, str]]:
    """Every template under ``folder``: where it goes (``.tmpl`` dropped) and its text."""
    found = []
    for entry in sorted(folder.iterdir(), key=lambda item: item.name):
        if entry.is_dir():
            found += _files(entry, relative / entry.name)
        elif entry.name.endswith(SUFFIX):
            found.append((relative / entry.name.removesuffix(SUFFIX), entry.read_text()))
    return found


def scaffold(directory: Path, package: str) -> list[Path]:
    """Write the project into ``directory`` (new or empty); the files written, relative to it."""
    values = {
        "project": directory.resolve().name,
        "package": package,
        "conveyor_version": importlib.metadata.version(DISTRIBUTION),
    }
    written = []
    for relative, text in _files(TEMPLATES, Path()):
        target = Path(*(package if part == PACKAGE_FOLDER else part for part in relative.parts))
        for name, value in values.items():
            text = text.replace("{{" + name + "}}", value)
        (directory / target).parent.mkdir(parents=True, exist_ok=True)
        (directory / target).write_text(text)
        written.append(target)
    return written


@click.command()
@click.argument("directory", default=".", type=click.Path(file_okay=False, path_type=Path))
def init(directory: Path) -> None:
    """Start a project in DIRECTORY (new or empty; default: here).

    It gets a topology, one job, its test (conveyor.testing) and a Makefile: `make test`, `make demo`.
    """
    if directory.exists() and any(directory.iterdir()):
        raise click.ClickException(f"{directory} is not empty: conveyor init writes only into a new or empty folder")
    package = package_name(directory)
    for path in scaffold(directory, package):
        click.echo(f"  created {directory / path}")
    click.echo(f"\nNext: cd {directory} && pip install -e '.[dev]' && make test && make demo")
