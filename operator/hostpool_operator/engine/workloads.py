"""What the operator knows of the workload behind a host, and what follows from it.

Pure: a workload (a Pod, a VirtualMachine, any object with a ``Ready`` condition) is kept as
a small record built from the API's JSON; from the record, the host's reference and ``now``
follow whether the host may take new sessions (its gate), whether it is still starting, the
host's address, and the manifest of a workload to create.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from ..api import API_VERSION, MAX_ADDRESS
from ..api.address import is_host_address
from ..api.timestamps import parse_time
from ..api.vocabulary import HOST_LABEL, MANAGED_LABEL, MANAGER, POOL_LABEL
from ..api.workload import (
    DEFAULT_ADDRESS_FROM,
    VolumeClaimTemplate,
    WorkloadRef,
    WorkloadTemplate,
)
from .records import HostRecord, newer_or_same

#: Phases a Pod or a KubeVirt VirtualMachineInstance never leaves: its machine is gone.
TERMINAL_PHASES = frozenset({"Failed", "Succeeded"})
#: Kinds whose status.phase says that (other kinds' phases mean what their authors chose).
PHASED_KINDS = frozenset({"Pod", "VirtualMachineInstance"})

#: (group, kind): which workloads one informer watches.
KindKey = tuple[str, str]
#: (namespace, group, kind, name): one workload.
WorkloadKey = tuple[str, str, str, str]


def kind_key(api_version: str, kind: str) -> KindKey:
    return (api_version.rpartition("/")[0], kind)


def workload_key(namespace: str, ref: WorkloadRef) -> WorkloadKey:
    return (namespace, ref.group, ref.kind, ref.name)


def resolve(obj: Mapping[str, Any], path: str) -> Any:
    """The value at a dotted path (list items by index), or None when any step is missing."""
    node: Any = obj
    for step in path.split("."):
        if isinstance(node, Mapping):
            node = node.get(step)
        elif isinstance(node, list) and step.isdigit() and int(step) < len(node):
            node = node[int(step)]
        else:
            return None
    return node


@dataclass(frozen=True, slots=True)
class WorkloadRecord:
    """The parts of a workload the operator reads."""

    namespace: str
    name: str
    uid: str
    created: datetime | None
    ready: bool
    #: Phase Failed or Succeeded (Pods, VMIs): it will never be Ready again.
    terminal: bool
    #: The uid of the SessionHost that controls it (None: someone else's).
    owner_host_uid: str | None
    #: metadata and status, for addressFrom (the spec is dropped: pods' are large).
    readable: dict[str, Any]
    #: Why it is not Ready, as its own status says (the scheduler's reason, a container
    #: waiting); empty when it says nothing.
    why_not_ready: str = ""

    @classmethod
    def of(cls, obj: Mapping[str, Any], kind: str) -> WorkloadRecord:
        """From the API's JSON (list items carry no kind: it is passed in)."""
        meta = obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else {}
        assert isinstance(meta, Mapping)
        status = obj.get("status") if isinstance(obj.get("status"), Mapping) else {}
        assert isinstance(status, Mapping)
        # A custom kind's status is whatever its controller wrote: anything not shaped like
        # conditions simply is not Ready.
        conditions = status.get("conditions")
        ready = isinstance(conditions, list) and any(
            isinstance(c, Mapping) and c.get("type") == "Ready" and c.get("status") == "True"
            for c in conditions
        )
        owners = meta.get("ownerReferences")
        owner = next(
            (
                str(ref.get("uid", ""))
                for ref in (owners if isinstance(owners, list) else [])
                if isinstance(ref, Mapping)
                and ref.get("controller")
                and ref.get("kind") == "SessionHost"
            ),
            None,
        )
        terminal = kind in PHASED_KINDS and status.get("phase") in TERMINAL_PHASES
        # Being deleted: whatever its conditions still say, it takes no new session.
        ready = ready and not meta.get("deletionTimestamp")
        readable = {
            "metadata": {k: v for k, v in meta.items() if k != "managedFields"},
            "status": dict(status),
        }
        return cls(
            namespace=str(meta.get("namespace", "")),
            name=str(meta.get("name", "")),
            uid=str(meta.get("uid", "")),
            created=parse_time(meta.get("creationTimestamp")),
            ready=ready and not terminal,
            terminal=terminal,
            owner_host_uid=owner,
            readable=readable,
            why_not_ready="" if ready else _why_not_ready(status),
        )

    @property
    def resource_version(self) -> str | None:
        version = self.readable.get("metadata", {}).get("resourceVersion")
        return str(version) if version is not None else None

    def older_than(self, seen: WorkloadRecord | None) -> bool:
        """Is this an older version of the same workload than ``seen``? A create's answer
        can arrive after the watch has delivered a newer version (a fast kubelet had made
        the Pod Ready meanwhile): taken last, it would leave the host waiting for a Ready
        that was already seen, with nothing left to tell it again."""
        return (
            seen is not None
            and seen.uid == self.uid
            and not newer_or_same(self.resource_version, seen.resource_version)
        )

    def address(self, path: str | None) -> str | None:
        value = resolve(self.readable, path or DEFAULT_ADDRESS_FROM)
        if isinstance(value, bool) or not isinstance(value, str | int):
            return None  # a boolean, an object or a list is no address
        return str(value)[:MAX_ADDRESS] or None


def host_address(host: HostRecord, workload: WorkloadRecord | None) -> str | None:
    """The address in force: the spec's, else the workload's (at its reference's
    addressFrom), else the one the agent reports. The workload's wins over the agent's: the
    agent runs beside users' sessions, the workload's status is its controller's. Only an
    IP address or a DNS name is ever in force (``is_host_address``): any other value is
    skipped like a missing one, so nothing else reaches a request or an .rdp file."""
    if host.spec is None:
        return None
    ref = host.spec.workload_ref
    agent = host.status.get("agent")
    candidates = (
        host.spec.address,
        workload.address(ref.address_from) if ref is not None and workload else None,
        agent.get("address") if isinstance(agent, Mapping) else None,
    )
    return next((c for c in candidates if isinstance(c, str) and is_host_address(c)), None)


class Gate(enum.StrEnum):
    """May the host take new sessions, as far as its workload goes."""

    OPEN = "Ready"
    NOT_READY = "WorkloadNotReady"
    MISSING = "WorkloadMissing"


@dataclass(frozen=True, slots=True)
class WorkloadState:
    """A host's workload as its decisions see it."""

    gate: Gate
    #: Created by the operator and not Ready yet, within hostReadyTimeoutSeconds: its slots
    #: are on their way (scaling counts them; waiting requests say HostsStarting).
    starting: bool
    #: Not Ready for longer than hostReadyTimeoutSeconds: reported and counted out.
    timed_out: bool
    #: The WorkloadReady condition's reason and message.
    reason: str
    message: str
    #: When a starting host's ready timeout ends.
    ready_by: datetime | None = None


#: The longest reason quoted from a workload's status.
MAX_WHY = 300


def _why_not_ready(status: Mapping[str, Any]) -> str:
    """A workload's own account of why it is not Ready: a Pod the scheduler cannot place
    (PodScheduled False: "0/3 nodes are available: ..."), else a container waiting with a
    reason (ImagePullBackOff, CrashLoopBackOff) and its message."""
    conditions = status.get("conditions")
    for c in conditions if isinstance(conditions, list) else []:
        if (
            isinstance(c, Mapping)
            and c.get("type") == "PodScheduled"
            and c.get("status") == "False"
        ):
            return _said(c.get("reason"), c.get("message"))
    for key in ("initContainerStatuses", "containerStatuses"):
        containers = status.get(key)
        for c in containers if isinstance(containers, list) else []:
            waiting = (c.get("state") or {}).get("waiting") if isinstance(c, Mapping) else None
            if isinstance(waiting, Mapping) and waiting.get("reason") not in (
                None,
                "ContainerCreating",
                "PodInitializing",
            ):
                said = _said(waiting.get("reason"), waiting.get("message"))
                return f"container {c.get('name')}: {said}"
    return ""


def _said(reason: object, message: object) -> str:
    text = ": ".join(str(p) for p in (reason, message) if isinstance(p, str) and p)
    return text[:MAX_WHY]


def workload_state(
    ref: WorkloadRef,
    workload: WorkloadRecord | None,
    *,
    known: bool,
    managed: bool,
    host_created: datetime | None,
    ready_timeout: float,
    now: datetime,
) -> WorkloadState:
    """The gate of a host with a workloadRef. ``known``: the workload's kind has been listed,
    so an absent record means the workload does not exist."""
    what = f"{ref.kind} {ref.name!r}"
    if workload is not None and workload.ready:
        return WorkloadState(Gate.OPEN, False, False, "Ready", f"{what} is Ready")
    if workload is None:
        gate = Gate.MISSING
        reason = "Missing" if known else "NotObserved"
        message = f"{what} does not exist" if known else f"{what} not observed yet"
    else:
        gate = Gate.NOT_READY
        reason = "Terminated" if workload.terminal else "NotReady"
        message = f"{what} has ended" if workload.terminal else f"{what} is not Ready"
        if workload.why_not_ready and not workload.terminal:
            message = f"{message} ({workload.why_not_ready})"
    starting = timed_out = False
    ready_by = None
    if managed and (workload is not None or not known):
        # Starting: it exists but is not Ready yet, or it is not listed yet. A workload known
        # to be missing is not on its way (it was refused, or is being made again).
        # A recreated workload starts afresh: the clock runs from the later creation.
        times = [t for t in (host_created, workload.created if workload else None) if t]
        since = max(times) if times else now
        waited = (now - since).total_seconds()
        if waited < ready_timeout:
            starting = True
            ready_by = since + timedelta(seconds=ready_timeout)
        else:
            timed_out = True
            reason = "StartTimeout"
            message = f"{message} {waited:.0f}s after it was created; counted out of capacity"
    return WorkloadState(gate, starting, timed_out, reason, message, ready_by)


def _owned_by_host(host: str, host_uid: str) -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": API_VERSION,
            "kind": "SessionHost",
            "name": host,
            "uid": host_uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]


def claim_name(template: VolumeClaimTemplate, host: str) -> str:
    """A host's claim of a template: ``<template>-<host>``, as a StatefulSet names them."""
    return f"{template.metadata.name}-{host}"


def claim_manifests(
    templates: Sequence[VolumeClaimTemplate],
    *,
    host: str,
    host_uid: str,
    namespace: str,
    pool: str,
) -> list[dict[str, Any]]:
    """The host's PersistentVolumeClaims: controlled by the host, so they outlive its
    workload (a stopped personal host keeps its data) and go with the host."""
    return [
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {
                "name": claim_name(template, host),
                "namespace": namespace,
                "labels": {
                    **template.metadata.labels,
                    POOL_LABEL: pool,
                    HOST_LABEL: host,
                    MANAGED_LABEL: MANAGER,
                },
                "annotations": dict(template.metadata.annotations),
                "ownerReferences": _owned_by_host(host, host_uid),
            },
            "spec": template.spec,
        }
        for template in templates
    ]


def with_claim_volumes(
    spec: Mapping[str, Any], templates: Sequence[VolumeClaimTemplate], host: str
) -> dict[str, Any]:
    """A Pod spec with a volume per claim template, named after the template (a volume of
    that name in the template's spec is left as written)."""
    volumes = list(spec.get("volumes") or [])
    named = {v.get("name") for v in volumes if isinstance(v, Mapping)}
    for template in templates:
        if template.metadata.name not in named:
            claim = {"claimName": claim_name(template, host)}
            volumes.append({"name": template.metadata.name, "persistentVolumeClaim": claim})
    return {**spec, "volumes": volumes} if volumes else dict(spec)


#: The pool's clipboard setting in each container of a Pod the operator starts (Enabled or
#: Disabled): the session-host image's entrypoint turns xrdp's clipboard channel off by it.
CLIPBOARD_ENV = "HOSTPOOL_CLIPBOARD"


def with_env(spec: Mapping[str, Any], env: Mapping[str, str]) -> dict[str, Any]:
    """A Pod spec whose every container has these variables, the pool's: a container's own
    of the same name is replaced (the pool's setting is what the host must follow)."""
    containers = []
    for container in spec.get("containers") or []:
        if not isinstance(container, Mapping):
            containers.append(container)
            continue
        own = [
            e
            for e in container.get("env") or []
            if not (isinstance(e, Mapping) and e.get("name") in env)
        ]
        own += [{"name": name, "value": value} for name, value in env.items()]
        containers.append({**container, "env": own})
    return {**spec, "containers": containers}


def workload_manifest(
    template: WorkloadTemplate,
    *,
    host: str,
    host_uid: str,
    namespace: str,
    pool: str,
    claims: Sequence[VolumeClaimTemplate] = (),
    env: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The workload of a new host: the template's object, named after the host, labelled
    with its pool and host, controlled by the host (so garbage collection removes it); a
    Pod mounts the host's claims by their templates' names and has ``env`` (the pool's
    settings the host follows) in each container."""
    labels = {
        **template.metadata.labels,
        POOL_LABEL: pool,
        HOST_LABEL: host,
        MANAGED_LABEL: MANAGER,
    }
    spec = template.spec
    pod = template.kind == "Pod" and template.api_version == "v1"
    if claims and pod:
        spec = with_claim_volumes(spec, claims, host)
    if env and pod and isinstance(spec.get("containers"), list):
        spec = with_env(spec, env)
    return {
        "apiVersion": template.api_version,
        "kind": template.kind,
        "metadata": {
            "name": host,
            "namespace": namespace,
            "labels": labels,
            "annotations": dict(template.metadata.annotations),
            "ownerReferences": _owned_by_host(host, host_uid),
        },
        "spec": spec,
    }


def workload_ref(template: WorkloadTemplate, host: str) -> WorkloadRef:
    """The reference a new host keeps to its workload."""
    return WorkloadRef(
        api_version=template.api_version,
        kind=template.kind,
        name=host,
        address_from=template.address_from,
    )
