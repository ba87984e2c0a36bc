"""Tests sharing a costly fixture (a CDK synth, the wheel's build) run on one xdist worker: their group holds."""

import pytest

GROUP = "xdist-group-check"


@pytest.mark.xdist_group(GROUP)
def test_a_tests_xdist_group_reaches_the_scheduler(request: pytest.FixtureRequest) -> None:
    """Under ``--dist loadgroup`` (as `make test` runs) xdist appends the group to the node id and schedules by it.

    A pytest that xdist cannot mark this way drops every group silently: each worker then synthesizes
    the app (and builds the wheel, racing another build in the checkout) on its own.
    """
    if not request.config.getvalue("loadgroup"):
        pytest.skip("runs under pytest-xdist's --dist loadgroup, as `make test` runs pytest")
    assert request.node.nodeid.endswith(f"@{GROUP}")
