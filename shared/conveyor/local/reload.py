"""`conveyor local up --reload`: restart the workers when the project's code changes.

What is watched is the package the topology module lives in (its jobs, their models and
providers with it). On a change the package is imported afresh, the topology read again, what
it adds provisioned, and the workers restarted (LocalRuntime.reload); the embedded AWS keeps
running, so every queue keeps its messages. Code that fails to import or to provision is one
line, and the workers already running go on with the code they have.
"""

import importlib
import importlib.util
import sys
import traceback
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from conveyor.contract.loader import load_topology
from conveyor.local.runtime import LocalRuntime


def project_package(spec: str) -> str:
    """The top-level package (or module) of a topology spec: ``functions.topology:TOPOLOGY`` -> ``functions``."""
    return spec.partition(":")[0].split(".")[0]


def watched_paths(spec: str) -> list[Path]:
    """Where the project's code is: the directories of the topology's top-level package, or its module file."""
    found = importlib.util.find_spec(project_package(spec))
    if found is None:
        return []
    if found.submodule_search_locations:
        return [Path(location) for location in found.submodule_search_locations]
    return [Path(found.origin)] if found.origin else []


def forget(package: str) -> None:
    """Drop ``package`` and its submodules from the import cache, so the next import reads the files again."""
    for name in [name for name in sys.modules if name == package or name.startswith(package + ".")]:
        del sys.modules[name]
    importlib.invalidate_caches()


def changes(paths: list[Path], stop: Any) -> Iterable[set[tuple[Any, str]]]:
    """Each batch of changes to Python files under ``paths``, until ``stop.is_set()``."""
    # Imported here: watchfiles comes with the local extra, and `conveyor` runs without it elsewhere.
    from watchfiles import PythonFilter, watch

    return watch(*paths, watch_filter=PythonFilter(), stop_event=stop, raise_interrupt=False)


class Reloader:
    """Reloads ``runtime`` with the project's code as it is now; ``say`` reports each reload in one line."""

    def __init__(self, runtime: LocalRuntime, spec: str, *, grace_s: float, say: Callable[[str], None]) -> None:
        self._runtime = runtime
        self._spec = spec
        self._grace_s = grace_s
        self._say = say

    def reload(self) -> bool:
        """True if the workers now run the new code; False (and one line) if it did not import or provision."""
        forget(project_package(self._spec))
        try:
            topology = load_topology(self._spec)
            before = set(self._runtime.provisioned.queues)
            finished = self._runtime.reload(topology, self._grace_s)
        # Whatever the edited code raises (a SyntaxError mid-edit, say): a dev server reports it and runs on.
        except Exception as error:
            where = self._where(error)
            self._say(
                f"conveyor: reload failed ({where}{type(error).__name__}: {error}); the workers run the previous code"
            )
            return False
        added = sorted(set(self._runtime.provisioned.queues) - before)
        self._say(
            "conveyor: reloaded; workers restarted"
            + (f", new queues {', '.join(added)}" if added else "")
            + ("" if finished else "; batches still running were left to return to their queues")
        )
        return True

    def _where(self, error: Exception) -> str:
        """``"<file>:<line>: "`` of the innermost frame in the project's code, if the error came from there."""
        roots = [str(path) for path in watched_paths(self._spec)]
        frames = [
            frame for frame in traceback.extract_tb(error.__traceback__) if frame.filename.startswith(tuple(roots))
        ]
        return f"{frames[-1].filename}:{frames[-1].lineno}: " if frames and roots else ""

    def follow(self, batches: Iterable[set[tuple[Any, str]]]) -> None:
        """Reload once per batch of changes (from ``changes``, or a test's own), until they end."""
        for batch in batches:
            names = sorted({Path(path).name for _, path in batch})
            self._say(f"conveyor: {', '.join(names)} changed; reloading")
            self.reload()
