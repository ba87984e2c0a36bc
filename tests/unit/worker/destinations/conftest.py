"""The fixtures every test of the shared limits uses: the clock they run on and the limits table."""

import pytest

from tests.aws import Aws
from tests.unit.worker.destinations.limits_support import Clock


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def table(aws: Aws) -> str:
    return aws.provisioned.limits_table
