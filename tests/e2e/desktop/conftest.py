"""What the desktop tests need of this machine: the suite's hosts' bridge, for real xrdp
hosts in network namespaces, and the RDP client. Each fails under CI (the desktops must run
there) and skips elsewhere, saying why, when it cannot be had."""

from __future__ import annotations

import os
from typing import NoReturn

import pytest

from support.desktop import why_no_client, why_not
from support.kube import Kube


def cannot_run(reason: str) -> NoReturn:
    if os.environ.get("CI"):
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason)


@pytest.fixture
def hosts_bridge(kube: Kube) -> str:
    """The name of the suite's control plane's hosts' bridge: xrdp hosts in network
    namespaces go on it, and their agents reach the API server over it."""
    problem = why_not()
    if not problem and (kube.control_plane is None or not kube.control_plane.hosts_bridge):
        problem = (
            "the control plane does not serve on a hosts' bridge (an external cluster, or "
            "not root): the agents inside network namespaces cannot reach it"
        )
    if problem:
        cannot_run(f"real xrdp hosts cannot run here: {problem}")
    assert kube.control_plane is not None
    assert kube.control_plane.hosts_bridge
    return kube.control_plane.hosts_bridge.split(":", 1)[0]


@pytest.fixture
def rdp_client() -> None:
    """FreeRDP, Xvfb and ImageMagick, installed where missing."""
    problem = why_no_client()
    if problem:
        cannot_run(f"the RDP client cannot run here: {problem}")
