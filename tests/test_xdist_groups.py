"""``--dist loadgroup`` (make test's) keeps each ``xdist_group`` on one worker.

pytest-xdist tells its scheduler a test's group by suffixing the test's node id with ``@<group>``.
pytest 9.2 ignores that suffix (its node ids are NodeId objects), so every group spread over all
the workers: each of them started its own ``loopengine dev`` for the OpenAPI run, imported the
Anthropic SDK, and ran the cold-start probes again. pyproject.toml keeps pytest below 9.2.
"""

from __future__ import annotations

import os

import pytest

pytestmark = pytest.mark.xdist_group("layout-probe")


def test_a_grouped_test_carries_its_group_to_the_scheduler(request: pytest.FixtureRequest) -> None:
    if not os.environ.get("PYTEST_XDIST_WORKER") or not request.config.getvalue("loadgroup"):
        pytest.skip("only under pytest-xdist's --dist loadgroup")
    assert request.node.nodeid.endswith("@layout-probe"), request.node.nodeid
