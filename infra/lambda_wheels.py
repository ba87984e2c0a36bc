"""Wheels for a Lambda function's Python and architecture, fetched and installed with pip, never Docker.

The machine that synthesizes (Python 3.11, usually x86_64) is not the one that runs the
function (the runtime's Python on Amazon Linux 2023, here arm64), so pip is told the target's
interpreter and platforms and may use wheels only (``--only-binary=:all:``): nothing is built
here, and an extension compiled for this machine can never reach the bundle. A distribution
with no wheel for the target fails with one line naming it (a DeclarationError), not pip's
output.

Two steps, so synth needs no network: ``download`` fills a wheelhouse from the package index at
install time (``make setup``), and ``install`` puts the requirements into a folder from that
wheelhouse alone (``--no-index``), ignoring pip's configuration (``--isolated``) so the same
wheelhouse gives the same files on any machine. Both pin every distribution that is installed
here, the requirements' own dependencies included, to its installed version, which the tests ran.
"""

import importlib.metadata
import re
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from aws_cdk import aws_lambda as lambda_

from conveyor.contract.errors import DeclarationError

# Lambda's Python runtimes from python3.12 on run on Amazon Linux 2023, whose glibc is 2.34
# (https://docs.aws.amazon.com/lambda/latest/dg/lambda-runtimes.html): wheels built for glibc
# 2.17 (manylinux2014) up to 2.34 load there. Newest first, the order pip prefers them in.
GLIBC_MINORS = range(34, 16, -1)
# Lambda's architecture names -> the machine names in wheel platform tags.
WHEEL_MACHINES = {"arm64": "aarch64", "x86_64": "x86_64"}
_NO_MATCH = re.compile(r"No matching distribution found for (\S+)")
# The same, for a requirement the installed-versions constraint pins too (every one installed here):
# pip calls it a conflict between the request and the constraint, then names what has no distribution.
_NO_MATCH_CONSTRAINED = re.compile(r"no matching distributions available for your environment:\s*\n\s+(\S+)")


@dataclass(frozen=True)
class LambdaPlatform:
    """What pip must choose wheels for: the function's Python version and platform tags."""

    python_version: str
    platforms: tuple[str, ...]

    @classmethod
    def of(cls, runtime: lambda_.Runtime, architecture: lambda_.Architecture) -> "LambdaPlatform":
        """The platform of a function with ``runtime`` (``python3.14`` -> ``3.14``) on ``architecture``."""
        machine = WHEEL_MACHINES[architecture.name]
        return cls(
            python_version=runtime.name.removeprefix("python"),
            platforms=(*(f"manylinux_2_{minor}_{machine}" for minor in GLIBC_MINORS), f"manylinux2014_{machine}"),
        )

    def describe(self) -> str:
        """One phrase for messages: ``CPython 3.14 on manylinux_2_34_aarch64 .. manylinux2014_aarch64``."""
        return f"CPython {self.python_version} on {self.platforms[0]} .. {self.platforms[-1]}"

    def pip_options(self) -> list[str]:
        return [
            *(option for platform in self.platforms for option in ("--platform", platform)),
            "--python-version",
            self.python_version,
            "--implementation",
            "cp",
            "--only-binary=:all:",
        ]


def download(requirements: Sequence[str], wheelhouse: Path, platform: LambdaPlatform) -> None:
    """Fetch the wheels ``requirements`` need on ``platform`` (theirs and their dependencies') into ``wheelhouse``.

    Uses the network, through pip's own configuration (an index mirror applies): run at install time.
    """
    _pip(
        ["download", "--dest", str(wheelhouse)],
        requirements,
        platform,
        # pip says "no matching distribution" alike when the index has none and when it cannot be reached.
        where="on the package index (or the index could not be reached)",
    )


def install(requirements: Sequence[str], target: Path, wheelhouse: Path, platform: LambdaPlatform) -> None:
    """Install ``requirements`` and their dependencies for ``platform`` into ``target``, from ``wheelhouse`` only."""
    _pip(
        [
            "--isolated",
            "install",
            "--no-index",
            "--find-links",
            str(wheelhouse),
            "--target",
            str(target),
            # The bytecode this interpreter would write is for Python 3.11, not the function's.
            "--no-compile",
        ],
        requirements,
        platform,
        where=f"in {wheelhouse} (`make setup` downloads the worker requirements' wheels there)",
    )


def _installed_pins() -> str:
    """A constraints file pinning every distribution installed here to its version."""
    pins = {f"{dist.metadata['Name']}=={dist.version}" for dist in importlib.metadata.distributions()}
    return "".join(f"{pin}\n" for pin in sorted(pins))


def _pip(arguments: Sequence[str], requirements: Sequence[str], platform: LambdaPlatform, *, where: str) -> None:
    if not requirements:
        return
    with tempfile.TemporaryDirectory(prefix="conveyor-pins-") as scratch:
        constraints = Path(scratch) / "constraints.txt"
        constraints.write_text(_installed_pins())
        result = subprocess.run(  # noqa: S603 - this interpreter's pip, with arguments from the declarations
            [
                sys.executable,
                "-m",
                "pip",
                *arguments,
                "--disable-pip-version-check",
                "--no-input",
                *platform.pip_options(),
                "--constraint",
                str(constraints),
                *requirements,
            ],
            capture_output=True,
            text=True,
            check=False,
        )
    if result.returncode == 0:
        return
    # pip prints the resolver's explanation on stdout, its errors on stderr.
    output = f"{result.stderr}\n{result.stdout}"
    missing = _NO_MATCH.search(output) or _NO_MATCH_CONSTRAINED.search(output)
    if missing is not None:
        raise DeclarationError(
            f"worker bundle: no wheel of {missing[1]!r} for {platform.describe()} {where}; "
            "only such wheels can run in the function, so a distribution without one cannot be bundled"
        )
    errors = [line for line in result.stderr.splitlines() if line.startswith("ERROR:")] or ["pip failed"]
    raise DeclarationError(f"worker bundle: pip could not get {', '.join(requirements)}: {errors[0]}")
