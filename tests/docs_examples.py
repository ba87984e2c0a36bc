"""The Python examples of a doc page, by section, so tests can run them as written."""

import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
_BLOCK = re.compile(r"^```python\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def python_blocks(page: str, heading: str) -> list[str]:
    """The ```python blocks under ``heading`` (a whole line such as ``## Produce jobs``), up to the next heading."""
    text = (ROOT / page).read_text(encoding="utf-8")
    found = re.compile(rf"^{re.escape(heading)}$", re.MULTILINE).search(text)
    assert found, f"{page} has no heading {heading!r}"
    level = len(heading.split(" ", 1)[0])
    following = re.compile(rf"^#{{1,{level}}} ", re.MULTILINE).search(text, found.end())
    section = text[found.end() : following.start() if following else len(text)]
    return _BLOCK.findall(section)


def run_blocks(blocks: list[str]) -> dict[str, Any]:
    """Run the blocks in order in one namespace, as a reader pasting them would; returns the namespace."""
    namespace: dict[str, Any] = {}
    for block in blocks:
        exec(compile(block, "<doc example>", "exec"), namespace)
    return namespace
