"""The producer's trace id is read from the header SQS carries."""

import pytest

from conveyor.contract.trace_header import trace_id


@pytest.mark.parametrize(
    ("header", "root"),
    [
        (
            "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1",
            "1-5759e988-bd862e3fe1be46a994272793",
        ),
        ("Root=1-abc", "1-abc"),
        ("Parent=53995c3f42cd8ad8;Sampled=1", None),
        ("", None),
        (None, None),
    ],
)
def test_trace_id_is_the_root_of_the_header(header: str | None, root: str | None) -> None:
    assert trace_id(header) == root
