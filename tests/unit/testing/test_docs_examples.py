"""docs/testing.md, "Testing your jobs": every code block of the section runs as written, and its tests pass."""

import pytest

from tests.docs_examples import python_blocks, run_blocks

BLOCKS = python_blocks("docs/testing.md", "## Testing your jobs")


def test_the_section_has_examples() -> None:
    assert len(BLOCKS) >= 3


@pytest.mark.parametrize("block", BLOCKS, ids=[f"block-{index}" for index in range(len(BLOCKS))])
def test_a_documented_example_passes(block: str) -> None:
    namespace = run_blocks([block])
    tests = [value for name, value in namespace.items() if name.startswith("test_") and callable(value)]
    assert tests, "the block defines no test_ function"
    for test in tests:
        test()
