"""What every worker function runs: the code asset, the runtime and the Powertools layer.

The asset holds only what runs in Lambda: all of ``functions/`` (entry points, jobs, providers,
topology) and, of the library, ``conveyor/__init__.py`` with the sides a worker or relay
imports (``LAMBDA_LIBRARY``), side by side so ``functions.worker.handler`` imports ``conveyor``
exactly as it does in tests. The operator, CLI and local-runtime sides, scenarios, infra and
tests stay out: Lambda never runs them, and .importlinter keeps the shipped code from importing
them. Beside it go the few third-party distributions neither the runtime nor the Powertools
layer has (``BUNDLED_DISTRIBUTIONS``), copied from this interpreter's site-packages. Bundling
is a local copy (no Docker, no pip, no network); the asset hash is computed from the same files
that are copied, so any change to the shipped code or a bundled version, and only such a
change, produces a new asset.
"""

import hashlib
import importlib.metadata
import shutil
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import cast

import jsii
from aws_cdk import AssetHashType, Aws, BundlingOptions, DockerImage, ILocalBundling
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from conveyor.contract.errors import DeclarationError
from conveyor.contract.loader import TOPOLOGY_ENV

ROOT = Path(__file__).resolve().parent.parent
LIBRARY = ROOT / "shared" / "conveyor"
# What of the library runs in Lambda: the package's __init__ (it imports contract and sdk only),
# the lazy exports the sides' __init__s use, and the sides .importlinter's
# lambda-code-stays-in-lambda contract keeps off ops, cli and local.
LAMBDA_LIBRARY = ("__init__.py", "lazy.py", "contract", "sdk", "worker")
# Path inside the asset -> source file or folder.
SOURCES = {
    "functions": ROOT / "functions",
    **{f"conveyor/{part}": LIBRARY / part for part in LAMBDA_LIBRARY},
}
IGNORED_PARTS = {"__pycache__", ".mypy_cache", ".pytest_cache"}

# Third-party distributions the workers import that the Lambda runtime (boto3, botocore and
# their dependencies: python-dateutil, six, ...) and the Powertools layer (pydantic,
# aws-xray-sdk) lack: conveyor.contract.schedules evaluates cron with croniter, and zoneinfo needs
# tzdata where the OS ships no time zone database. They are copied from the installed,
# pinned versions (requirements.txt), so they must be pure Python: a compiled extension
# built for this machine would not load on Lambda's arm64 Linux.
BUNDLED_DISTRIBUTIONS = ("croniter", "tzdata")
COMPILED_SUFFIXES = frozenset({".so", ".pyd", ".dylib"})
# What pip writes about the installation itself: local paths, and hashes of .pyc files that
# don't ship. The license files and METADATA do ship.
INSTALLER_RECORDS = frozenset({"INSTALLER", "RECORD", "REQUESTED", "direct_url.json"})

RUNTIME = lambda_.Runtime.PYTHON_3_14
ARCHITECTURE = lambda_.Architecture.ARM_64
HANDLER = "functions.worker.handler"
# The layer is built per Python version and architecture; it must match RUNTIME/ARCHITECTURE.
POWERTOOLS_LAYER_NAME = "AWSLambdaPowertoolsPythonV3-python314-arm64"
POWERTOOLS_ACCOUNT = "017000801446"


def _asset_files() -> Iterator[tuple[str, Path]]:
    """(path inside the asset, path on disk) for every file that ships, in a stable order."""
    for target, source in SOURCES.items():
        if source.is_file():
            yield target, source
            continue
        if not source.is_dir():
            # A renamed side would otherwise ship an asset that fails only at its first import.
            raise DeclarationError(f"worker bundle: {source} does not exist")
        for path in sorted(source.rglob("*")):
            relative = path.relative_to(source)
            if path.is_file() and not IGNORED_PARTS.intersection(relative.parts) and path.suffix != ".pyc":
                yield f"{target}/{relative.as_posix()}", path
    for name in BUNDLED_DISTRIBUTIONS:
        yield from _distribution_files(name)


def _distribution_files(name: str) -> Iterator[tuple[str, Path]]:
    """An installed distribution's packages and dist-info, as installed (its RECORD), at the asset's root.

    Raises DeclarationError if it is not installed or is not pure Python.
    """
    where = f"worker bundle: distribution {name!r}"
    try:
        distribution = importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        raise DeclarationError(
            f"{where} is not installed in this interpreter; install requirements.txt before synth"
        ) from None
    files = sorted(distribution.files or [], key=lambda file: file.as_posix())
    if not files:
        raise DeclarationError(f"{where} has no RECORD of its files; reinstall it with pip")
    compiled = [file.as_posix() for file in files if file.suffix in COMPILED_SUFFIXES]
    if compiled:
        raise DeclarationError(
            f"{where} contains compiled extensions ({', '.join(compiled[:3])}), which would not load on Lambda; "
            "only pure-Python distributions can be copied into the bundle"
        )
    for file in files:
        relative = PurePosixPath(file.as_posix())
        if (
            relative.parts[0] == ".."  # console scripts and data outside site-packages
            or IGNORED_PARTS.intersection(relative.parts)
            or relative.suffix == ".pyc"
            or (relative.parts[0].endswith(".dist-info") and relative.name in INSTALLER_RECORDS)
        ):
            continue
        yield relative.as_posix(), Path(str(distribution.locate_file(file)))


def source_hash() -> str:
    digest = hashlib.sha256()
    for name, path in _asset_files():
        digest.update(name.encode())
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def copy_asset(output_dir: Path) -> None:
    """Write the asset's files into ``output_dir``: what Lambda unpacks into /var/task."""
    for name, path in _asset_files():
        destination = output_dir / name
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, destination)


@jsii.implements(ILocalBundling)
class _CopySources:
    def try_bundle(self, output_dir: str, options: BundlingOptions) -> bool:
        copy_asset(Path(output_dir))
        return True


class WorkerPackage(Construct):
    """The code asset, the pinned Powertools layer and the environment naming the topology, shared by every function."""

    def __init__(
        self, scope: Construct, construct_id: str, *, powertools_layer_version: int, topology_spec: str
    ) -> None:
        super().__init__(scope, construct_id)
        # The library never names the app: the functions find the declarations where synth did.
        self.environment = {TOPOLOGY_ENV: topology_spec}
        self.code = lambda_.Code.from_asset(
            str(SOURCES["functions"]),
            asset_hash_type=AssetHashType.CUSTOM,
            asset_hash=source_hash(),
            bundling=BundlingOptions(
                # Required by the API, never pulled: the local bundler always succeeds.
                image=DockerImage.from_registry("scratch"),
                # jsii calls try_bundle(output_dir, options) positionally, which the generated
                # keyword-only protocol signature cannot express for mypy.
                local=cast(ILocalBundling, _CopySources()),
            ),
        )
        self.powertools_layer = lambda_.LayerVersion.from_layer_version_arn(
            self,
            "PowertoolsLayer",
            f"arn:{Aws.PARTITION}:lambda:{Aws.REGION}:{POWERTOOLS_ACCOUNT}:layer:"
            f"{POWERTOOLS_LAYER_NAME}:{powertools_layer_version}",
        )
