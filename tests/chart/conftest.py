"""What the chart tests share: the project's helm, and the chart rendered by it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from support.controlplane import ensure_tools
from support.helm import helm_template
from support.monitoring import Obj
from support.paths import REPO_ROOT


@pytest.fixture(scope="module")
def helm() -> Path:
    return ensure_tools(REPO_ROOT) / "helm"


@pytest.fixture(scope="module")
def render(helm: Path) -> Callable[..., list[Obj]]:
    """``render(namespace="hostpool-system", **values)``: the documents ``helm template``
    renders of the chart with those values (``--set-json``: types arrive as given)."""

    def render(namespace: str = "hostpool-system", **values: Any) -> list[Obj]:
        return helm_template(helm, values, namespace=namespace)

    return render
