"""One source of truth for a topology with stream rules: local streams equal the deployed ones.

Its own module, because moto's state is process-wide: this topology's provisioning must not
share a mock with the project topology's (test_one_source's module fixture).
"""

from collections.abc import Iterator

import pytest

from conveyor.contract.relay_settings import OUTBOX_SOURCE
from tests.aws import Aws, moto_aws
from tests.fixtures.stream_topology import ORDERS
from tests.fixtures.stream_topology import TOPOLOGY as STREAM_TOPOLOGY
from tests.infra.conftest import Synthesized
from tests.infra.test_one_source import deployed_tables, local_tables


@pytest.fixture(scope="module")
def stream_aws() -> Iterator[Aws]:
    yield from moto_aws(STREAM_TOPOLOGY)


def test_local_streamed_tables_match_the_stack(stream_synthesized: Synthesized, stream_aws: Aws) -> None:
    """A table that a stream rule reads has the same NEW_IMAGE stream in both places; the others have none."""
    assert set(stream_aws.provisioned.streams) == {OUTBOX_SOURCE, ORDERS.name}
    assert local_tables(stream_aws) == deployed_tables(stream_synthesized)
