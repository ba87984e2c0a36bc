"""Session-wide test settings: no real AWS is ever reachable from the test suite, and moto is strict."""

import os
from collections.abc import Iterator

import pytest

from conveyor.local import moto_concurrency, strict

# Fake credentials and a fixed region for moto; no call may leave the machine.
os.environ.update(
    {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_REGION": "us-east-1",
        "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_ACCOUNT_ID_ENDPOINT_MODE": "disabled",
        "POWERTOOLS_TRACE_DISABLED": "true",
        "POWERTOOLS_METRICS_NAMESPACE": "Conveyor",
    }
)
os.environ.pop("AWS_ENDPOINT_URL", None)
os.environ.pop("AWS_PROFILE", None)

# Every in-process moto request is held to AWS's limits, before any client is made, and
# in-process moto behaves under concurrent requests as AWS does (atomic DynamoDB writes).
strict.install()
moto_concurrency.install()


@pytest.fixture(autouse=True)
def nothing_refused(request: pytest.FixtureRequest) -> Iterator[None]:
    """No request of the code under test is one AWS would refuse, except in tests that provoke refusals."""
    before = len(strict.refused())
    yield
    if request.node.get_closest_marker("provokes_refusals") is None:
        refused = strict.refused()[before:]
        assert not refused, f"strict mode refused {len(refused)} request(s) AWS would refuse: {refused[:3]}"
