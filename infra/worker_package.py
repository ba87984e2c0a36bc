"""What every worker function runs: the code asset, the runtime and the Powertools layer.

The asset holds only what runs in Lambda: all of ``functions/`` (entry points, jobs, providers,
topology) and, of the library, ``conveyor/__init__.py`` with the sides a worker or relay
imports (``LAMBDA_LIBRARY``), side by side so ``functions.worker.handler`` imports ``conveyor``
exactly as it does in tests. The operator, CLI and local-runtime sides, scenarios, infra and
tests stay out: Lambda never runs them, and .importlinter keeps the shipped code from importing
them. Beside it go the worker requirements: what the job code imports that neither the runtime
nor the Powertools layer has, named under ``[tool.conveyor] worker-requirements`` in
pyproject.toml and pinned once, in its dependencies. pip installs them as wheels for the
function's Python and architecture (``PLATFORM``, from ``RUNTIME`` and ``ARCHITECTURE``), never
this interpreter's, from the wheelhouse ``make setup`` downloads (infra/lambda_wheels.py): no
Docker, and no network at synth. They are installed into a staging folder first, and the asset
hash is computed from the same files that are then copied, so any change to the shipped code or
a bundled version, and only such a change, produces a new asset.
"""

import hashlib
import importlib.metadata
import shutil
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path, PurePosixPath
from typing import Any, cast

import jsii
from aws_cdk import AssetHashType, Aws, BundlingOptions, DockerImage, ILocalBundling
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from conveyor.contract import loader
from conveyor.contract.errors import DeclarationError
from conveyor.contract.loader import TOPOLOGY_ENV
from infra import lambda_wheels

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

PYPROJECT = ROOT / "pyproject.toml"
# Filled by `make setup` (Makefile: $(WHEELS_STAMP)), read by every synth; .cache/ is not committed.
WHEELHOUSE = ROOT / ".cache" / "worker-wheels"
# What pip writes beside the packages that Lambda never reads: the console scripts it generated
# for this machine (bin/), and its records of this installation, which hash them. The license
# files and METADATA do ship.
SCRIPTS = "bin"
INSTALLER_RECORDS = frozenset({"INSTALLER", "RECORD", "REQUESTED", "direct_url.json"})

RUNTIME = lambda_.Runtime.PYTHON_3_14
ARCHITECTURE = lambda_.Architecture.ARM_64
# What the bundled wheels are chosen for: the function's Python and platform, not this interpreter's.
PLATFORM = lambda_wheels.LambdaPlatform.of(RUNTIME, ARCHITECTURE)
HANDLER = "functions.worker.handler"
# The layer is built per Python version and architecture; it must match RUNTIME/ARCHITECTURE.
POWERTOOLS_LAYER_NAME = "AWSLambdaPowertoolsPythonV3-python314-arm64"
POWERTOOLS_ACCOUNT = "017000801446"


def worker_requirements() -> list[str]:
    """``name==version`` for each worker requirement, at the version installed here (pyproject.toml pins it)."""
    pinned = []
    for name in loader.worker_requirements(PYPROJECT):
        try:
            version = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            raise DeclarationError(
                f"worker bundle: worker requirement {name!r} is not installed here; pin it in the [project] "
                "dependencies of pyproject.toml and install them before synth"
            ) from None
        pinned.append(f"{name}=={version}")
    return pinned


def _code_files() -> Iterator[tuple[str, Path]]:
    """(path inside the asset, path on disk) for every file of the code that ships, in a stable order."""
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


def _installed_files(site: Path) -> Iterator[tuple[str, Path]]:
    """The files pip installed into ``site`` that ship, at the asset's root: packages and dist-info."""
    for path in sorted(site.rglob("*")):
        relative = PurePosixPath(path.relative_to(site).as_posix())
        if (
            not path.is_file()
            or relative.parts[0] == SCRIPTS
            or IGNORED_PARTS.intersection(relative.parts)
            or relative.suffix == ".pyc"
            or (relative.parts[0].endswith(".dist-info") and relative.name in INSTALLER_RECORDS)
        ):
            continue
        yield relative.as_posix(), path


def stage_asset(site: Path) -> list[tuple[str, Path]]:
    """Install the worker requirements into ``site``; then every shipped file: (path inside the asset, on disk)."""
    lambda_wheels.install(worker_requirements(), site, WHEELHOUSE, PLATFORM)
    return [*_code_files(), *_installed_files(site)]


def asset_hash(files: Iterable[tuple[str, Path]]) -> str:
    """What the asset's hash is computed from: each shipped file's path inside the asset and its contents."""
    digest = hashlib.sha256()
    for name, path in files:
        digest.update(name.encode())
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def copy_asset(files: Iterable[tuple[str, Path]], output_dir: Path) -> None:
    """Write the asset's files into ``output_dir``: what Lambda unpacks into /var/task."""
    for name, path in files:
        destination = output_dir / name
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, destination)


@jsii.implements(ILocalBundling)
class _CopyFiles:
    def __init__(self, files: list[tuple[str, Path]]) -> None:
        self._files = files

    def try_bundle(self, output_dir: str, options: BundlingOptions) -> bool:
        copy_asset(self._files, Path(output_dir))
        return True


class WorkerPackage(Construct):
    """The code asset, the pinned Powertools layer and the environment naming the topology, shared by every function."""

    def __init__(
        self, scope: Construct, construct_id: str, *, powertools_layer_version: int, topology_spec: str
    ) -> None:
        super().__init__(scope, construct_id)
        # The library never names the app: the functions find the declarations where synth did.
        self.environment = {TOPOLOGY_ENV: topology_spec}
        # CDK bundles when the first function binds the code, after this constructor returns: the
        # staged requirements live as long as the package (removed at exit).
        self._staging = tempfile.TemporaryDirectory(prefix="conveyor-worker-requirements-")
        files = stage_asset(Path(self._staging.name))
        self.code = lambda_.Code.from_asset(
            str(SOURCES["functions"]),
            asset_hash_type=AssetHashType.CUSTOM,
            asset_hash=asset_hash(files),
            bundling=BundlingOptions(
                # Required by the API, never pulled: the local bundler always succeeds.
                image=DockerImage.from_registry("scratch"),
                # jsii calls try_bundle(output_dir, options) positionally, which the generated
                # keyword-only protocol signature cannot express for mypy.
                local=cast(ILocalBundling, _CopyFiles(files)),
            ),
        )
        self.powertools_layer = lambda_.LayerVersion.from_layer_version_arn(
            self,
            "PowertoolsLayer",
            f"arn:{Aws.PARTITION}:lambda:{Aws.REGION}:{POWERTOOLS_ACCOUNT}:layer:"
            f"{POWERTOOLS_LAYER_NAME}:{powertools_layer_version}",
        )

    def function(
        self,
        scope: Construct,
        construct_id: str,
        *,
        handler: str,
        environment: Mapping[str, str],
        **options: Any,
    ) -> lambda_.Function:
        """A function of this package: Conveyor's runtime and architecture, this code and layer, ``handler``.

        ``environment`` is added to the package's own; ``options`` are the rest of ``lambda_.Function``'s
        (description, timeout, memory, role, log group...).
        """
        return lambda_.Function(
            scope,
            construct_id,
            runtime=RUNTIME,
            architecture=ARCHITECTURE,
            handler=handler,
            code=self.code,
            layers=[self.powertools_layer],
            environment={**self.environment, **environment},
            **options,
        )
