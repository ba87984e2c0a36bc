"""Session-wide test settings: no real AWS is ever reachable from the test suite, and moto is strict.

Also the in-process AWS of unit and infra tests: ``aws`` is moto with a topology provisioned by
the local runtime's own provisioner, fresh for each test. A test module changes what it gets by
overriding one of the small fixtures it depends on: ``topology`` (what is provisioned) and
``function_environment`` (the environment a deployed function would be given). ``empty_aws`` is
moto with nothing provisioned; ``logs`` is what the workers log. (tests/e2e/conftest.py overrides
``aws`` and ``topology`` with a moto server of its own.)
"""

import io
import logging
import os
from collections.abc import Iterator

import pytest
from moto import mock_aws

from conveyor.contract.settings import SERVICE_NAME
from conveyor.contract.topology import Topology
from conveyor.local import moto_concurrency, strict
from functions.topology import TOPOLOGY
from tests.aws import Aws, FunctionEnvironment, moto_aws

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


@pytest.fixture
def topology() -> Topology:
    """What ``aws`` provisions: the project's own topology, unless the test module overrides this fixture."""
    return TOPOLOGY


@pytest.fixture
def function_environment() -> FunctionEnvironment:
    """The environment ``aws`` sets once provisioned: none, unless the test module overrides this fixture."""
    return lambda aws: {}


@pytest.fixture
def aws(topology: Topology, function_environment: FunctionEnvironment) -> Iterator[Aws]:
    """In-process moto with ``topology`` provisioned, and ``function_environment`` set until the test ends."""
    with pytest.MonkeyPatch.context() as environment:
        for provisioned in moto_aws(topology):
            for name, value in function_environment(provisioned).items():
                environment.setenv(name, value)
            yield provisioned


@pytest.fixture
def empty_aws() -> Iterator[None]:
    """In-process moto with nothing provisioned, for tests that create (or look for) every resource themselves."""
    with mock_aws():
        yield


@pytest.fixture
def logs() -> Iterator[io.StringIO]:
    """What the workers' Powertools logger writes (its handler keeps the stream it started with)."""
    stream = io.StringIO()
    handlers = [h for h in logging.getLogger(SERVICE_NAME).handlers if isinstance(h, logging.StreamHandler)]
    previous = [handler.setStream(stream) for handler in handlers]
    yield stream
    for handler, old in zip(handlers, previous, strict=True):
        handler.setStream(old)
