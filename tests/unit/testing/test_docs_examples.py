"""docs/testing.md, "Testing your jobs": every code block of the section runs as written, and its tests pass."""

import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[3] / "docs" / "testing.md"
SECTION = "## Testing your jobs"
_BLOCK = re.compile(r"^```python\n(.*?)^```$", re.DOTALL | re.MULTILINE)


def section_blocks(text: str) -> list[str]:
    """The python code blocks between the section's heading and the next heading of its level."""
    start = text.index(SECTION + "\n")
    end = text.find("\n## ", start + len(SECTION))
    return _BLOCK.findall(text[start : end if end != -1 else len(text)])


BLOCKS = section_blocks(DOC.read_text())


def test_the_section_has_examples() -> None:
    assert len(BLOCKS) >= 3


@pytest.mark.parametrize("block", BLOCKS, ids=[f"block-{index}" for index in range(len(BLOCKS))])
def test_a_documented_example_passes(block: str) -> None:
    namespace: dict[str, object] = {}
    exec(compile(block, str(DOC), "exec"), namespace)
    tests = [value for name, value in namespace.items() if name.startswith("test_") and callable(value)]
    assert tests, "the block defines no test_ function"
    for test in tests:
        test()
