"""The CLI's commands against the in-process moto, found as the local runtime's fixed names."""

import pytest

from conveyor.ops import target as target_module
from tests.aws import Aws


@pytest.fixture
def local(aws: Aws, monkeypatch: pytest.MonkeyPatch) -> Aws:
    """``aws``, where the CLI finds the local runtime's fixed names (no endpoint to point at)."""
    monkeypatch.setattr(target_module, "is_local", lambda: True)
    return aws
