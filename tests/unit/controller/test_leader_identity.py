"""The leader-election identity: the pod's name in a pod, unique per process elsewhere."""

from __future__ import annotations

import pytest

from hostpool_operator.controller.leader import identity


def test_the_pod_name_is_the_identity(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POD_NAME", "hostpool-operator-7d9f6-x2k4q")
    assert identity() == "hostpool-operator-7d9f6-x2k4q"
    assert identity() == identity()  # a restarted container is the same holder


@pytest.mark.parametrize("value", [None, "", "  "])
def test_without_a_pod_name_every_process_is_a_holder_of_its_own(
    monkeypatch: pytest.MonkeyPatch, value: str | None
) -> None:
    if value is None:
        monkeypatch.delenv("POD_NAME", raising=False)
    else:
        monkeypatch.setenv("POD_NAME", value)
    first, second = identity(), identity()
    assert first != second
    assert "_" in first.strip()
