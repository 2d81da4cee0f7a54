"""A pool's earlier host templates, kept as ``ControllerRevision`` objects (as a Deployment's
or a StatefulSet's are), so that ``kubectl hostpool rollout history`` lists them and ``undo``
puts one back.

Pure: the manifest of a revision, which ones to prune, and a revision read back.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..api.base import pool_owner
from ..api.update import REVISION_HISTORY
from ..api.vocabulary import POOL_LABEL, TEMPLATE_REVISION_LABEL

CONTROLLER_REVISIONS = "controllerrevisions"
APPS_V1 = "apps/v1"


def revision_name(pool: str, revision: str) -> str:
    """The ControllerRevision of ``revision``: the pool's name (cut to fit) and the hash."""
    return f"{pool[:52]}-{revision}"


def revision_manifest(
    *,
    pool: str,
    pool_uid: str,
    namespace: str,
    revision: str,
    template: Mapping[str, Any],
    number: int,
) -> dict[str, Any]:
    """The ControllerRevision holding one host template, owned by the pool (it goes with
    it). ``number`` orders the revisions: the pool's generation when the template was first
    seen."""
    return {
        "apiVersion": APPS_V1,
        "kind": "ControllerRevision",
        "metadata": {
            "name": revision_name(pool, revision),
            "namespace": namespace,
            "labels": {POOL_LABEL: pool, TEMPLATE_REVISION_LABEL: revision},
            "ownerReferences": [pool_owner(pool, pool_uid, block_deletion=False)],
        },
        "data": {"hostTemplate": dict(template)},
        "revision": number,
    }


@dataclass(frozen=True, slots=True)
class KeptRevision:
    """A ControllerRevision of a pool, read back."""

    name: str
    revision: str
    number: int
    template: Mapping[str, Any]
    created: str

    @classmethod
    def of(cls, obj: Mapping[str, Any]) -> KeptRevision | None:
        """None for an object that is not one of ours (no label, no template)."""
        meta = obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else {}
        assert isinstance(meta, Mapping)
        labels = meta.get("labels") if isinstance(meta.get("labels"), Mapping) else {}
        assert isinstance(labels, Mapping)
        data = obj.get("data") if isinstance(obj.get("data"), Mapping) else {}
        assert isinstance(data, Mapping)
        revision = labels.get(TEMPLATE_REVISION_LABEL)
        template = data.get("hostTemplate")
        number = obj.get("revision")
        if not isinstance(revision, str) or not isinstance(template, Mapping):
            return None
        return cls(
            name=str(meta.get("name", "")),
            revision=revision,
            number=number if isinstance(number, int) else 0,
            template=template,
            created=str(meta.get("creationTimestamp", "")),
        )


def newest_first(kept: Sequence[KeptRevision]) -> list[KeptRevision]:
    return sorted(kept, key=lambda k: (k.number, k.created, k.name), reverse=True)


def to_prune(kept: Sequence[KeptRevision], current: str) -> list[str]:
    """The revisions past the last :data:`REVISION_HISTORY` (the current one always stays)."""
    ordered = [k for k in newest_first(kept) if k.revision != current]
    return [k.name for k in ordered[REVISION_HISTORY - 1 :]]
