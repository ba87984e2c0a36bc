"""What every worker function runs: the code asset, the runtime and the Powertools layer.

The asset is ``functions/`` plus ``shared/conveyor/`` copied side by side, so the handler
``functions.worker.handler`` imports ``conveyor`` exactly as it does in tests. Bundling is
a local copy (no Docker); the asset hash is computed from the same files that are copied,
so any change to either tree, and only such a change, produces a new asset.
"""

import hashlib
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import jsii
from aws_cdk import AssetHashType, Aws, BundlingOptions, DockerImage, ILocalBundling
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

ROOT = Path(__file__).resolve().parent.parent
# Asset folder name -> source folder.
SOURCES = {"functions": ROOT / "functions", "conveyor": ROOT / "shared" / "conveyor"}
IGNORED_PARTS = {"__pycache__", ".mypy_cache", ".pytest_cache"}

RUNTIME = lambda_.Runtime.PYTHON_3_14
ARCHITECTURE = lambda_.Architecture.ARM_64
HANDLER = "functions.worker.handler"
# The layer is built per Python version and architecture; it must match RUNTIME/ARCHITECTURE.
POWERTOOLS_LAYER_NAME = "AWSLambdaPowertoolsPythonV3-python314-arm64"
POWERTOOLS_ACCOUNT = "017000801446"


def _asset_files() -> Iterator[tuple[str, Path]]:
    """(path inside the asset, path on disk) for every file that ships, in a stable order."""
    for target, source in SOURCES.items():
        for path in sorted(source.rglob("*")):
            relative = path.relative_to(source)
            if path.is_file() and not IGNORED_PARTS.intersection(relative.parts) and path.suffix != ".pyc":
                yield f"{target}/{relative.as_posix()}", path


def source_hash() -> str:
    digest = hashlib.sha256()
    for name, path in _asset_files():
        digest.update(name.encode())
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


@jsii.implements(ILocalBundling)
class _CopySources:
    def try_bundle(self, output_dir: str, options: BundlingOptions) -> bool:
        for name, path in _asset_files():
            destination = Path(output_dir) / name
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, destination)
        return True


class WorkerPackage(Construct):
    """The code asset and the pinned Powertools layer, shared by every worker function."""

    def __init__(self, scope: Construct, construct_id: str, *, powertools_layer_version: int) -> None:
        super().__init__(scope, construct_id)
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
