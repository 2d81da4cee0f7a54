"""A pool's templates kept as ControllerRevisions: the manifest, reading one back, and which
go once more than ten are kept."""

from __future__ import annotations

from hostpool_operator.api import REVISION_HISTORY
from hostpool_operator.rollout.history import (
    KeptRevision,
    newest_first,
    revision_manifest,
    revision_name,
    to_prune,
)


def kept(number: int, revision: str | None = None) -> KeptRevision:
    return KeptRevision(f"desk-{number}", revision or f"r{number}", number, {}, "")


def test_a_revision_is_owned_by_its_pool_and_read_back_as_written() -> None:
    body = revision_manifest(
        pool="desk", pool_uid="u-1", namespace="vdi", revision="1e4c0d23f9",
        template={"workload": {"kind": "Pod"}}, number=7,
    )  # fmt: skip
    assert body["metadata"]["name"] == revision_name("desk", "1e4c0d23f9") == "desk-1e4c0d23f9"
    owner = body["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == (
        "HostPool", "desk", "u-1", True,
    )  # fmt: skip
    back = KeptRevision.of({**body, "metadata": {**body["metadata"], "creationTimestamp": "t"}})
    assert back == KeptRevision(
        "desk-1e4c0d23f9", "1e4c0d23f9", 7, {"workload": {"kind": "Pod"}}, "t"
    )


def test_a_long_pool_name_still_makes_a_valid_name() -> None:
    assert len(revision_name("p" * 253, "1e4c0d23f9")) <= 63


def test_objects_that_are_not_ours_are_skipped() -> None:
    assert KeptRevision.of({"metadata": {"name": "x"}, "data": {}}) is None
    assert KeptRevision.of({"metadata": {"labels": {"hostpool.io/template-revision": "r"}}}) is None


def test_the_last_ten_are_kept_and_the_current_one_always() -> None:
    revisions = [kept(n) for n in range(1, 15)]
    assert [k.number for k in newest_first(revisions)][:3] == [14, 13, 12]
    pruned = to_prune(revisions, current="r14")
    assert pruned == [f"desk-{n}" for n in range(4, 0, -1)]
    assert len(revisions) - len(pruned) == REVISION_HISTORY
    # An undo brought back an old template: it is current, so it stays whatever its number.
    assert "desk-1" not in to_prune(revisions, current="r1")
