"""The API of hosts backed by workloads: the template a pool creates each host's workload
from, and the reference a SessionHost keeps to its workload.

A workload is any namespaced object with a ``Ready`` condition: a Pod (a Linux desktop
container), a KubeVirt VirtualMachine (a Windows RDS host), or a custom resource whose
controller reports readiness the same way.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from .base import MAX_ANNOTATION_VALUE, MAX_LABEL_VALUE, MAX_LABELS, MAX_NAME, ApiModel

#: Where a host's address is read from when neither its spec nor the template says.
DEFAULT_ADDRESS_FROM = "status.podIP"
#: A dotted path into the workload's metadata or status (list items by index).
ADDRESS_FROM_PATTERN = r"^(status|metadata)(\.[A-Za-z0-9_-]+)+$"
#: group/version or version, as in any manifest.
API_VERSION_PATTERN = r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?v[0-9]+((alpha|beta)[0-9]+)?$"
KIND_PATTERN = r"^[A-Z][A-Za-z0-9]*$"


class TemplateMetadata(ApiModel):
    """Labels and annotations for the objects the operator creates."""

    labels: dict[str, Annotated[str, Field(max_length=MAX_LABEL_VALUE)]] = Field(
        default_factory=dict,
        max_length=MAX_LABELS,
        description="Labels for each new object (the operator adds its own).",
    )
    annotations: dict[str, Annotated[str, Field(max_length=MAX_ANNOTATION_VALUE)]] = Field(
        default_factory=dict,
        max_length=MAX_LABELS,
        description="Annotations for each new object.",
    )


class WorkloadTemplate(ApiModel):
    """The workload created with each new host: in the pool's namespace, named after the
    host, owned by it (deleting the host deletes the workload)."""

    api_version: str = Field(
        min_length=1,
        max_length=MAX_NAME,
        pattern=API_VERSION_PATTERN,
        description="The workload's apiVersion, e.g. v1 or kubevirt.io/v1.",
    )
    kind: str = Field(
        min_length=1,
        max_length=63,
        pattern=KIND_PATTERN,
        description="The workload's kind, e.g. Pod or VirtualMachine.",
    )
    metadata: TemplateMetadata = Field(
        default_factory=TemplateMetadata,
        description="Labels and annotations of each workload (hostpool.io/pool and "
        "hostpool.io/host are added).",
    )
    spec: dict[str, Any] = Field(
        default_factory=dict,
        description="The workload's own spec, kept as written; the API server of its kind "
        "validates it when the operator creates a workload.",
    )
    address_from: str = Field(
        default=DEFAULT_ADDRESS_FROM,
        max_length=MAX_NAME,
        pattern=ADDRESS_FROM_PATTERN,
        description="Dotted path in the workload's status or metadata giving the host's "
        "address (list items by index, e.g. status.interfaces.0.ipAddress).",
    )


#: A volume's name in a Pod: a DNS label.
VOLUME_NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
#: The most claim templates a host template may name.
MAX_CLAIM_TEMPLATES = 8


class ClaimTemplateMetadata(ApiModel):
    """The name of a claim template (its volume's name in the workload) and what each claim
    made from it carries."""

    name: str = Field(
        min_length=1,
        max_length=63,
        pattern=VOLUME_NAME_PATTERN,
        description="The volume's name in the workload; each host's claim is named <name>-<host>.",
    )
    labels: dict[str, Annotated[str, Field(max_length=MAX_LABEL_VALUE)]] = Field(
        default_factory=dict, max_length=MAX_LABELS, description="Labels of each claim."
    )
    annotations: dict[str, Annotated[str, Field(max_length=MAX_ANNOTATION_VALUE)]] = Field(
        default_factory=dict, max_length=MAX_LABELS, description="Annotations of each claim."
    )


class VolumeClaimTemplate(ApiModel):
    """A PersistentVolumeClaim made once per host (a StatefulSet's volumeClaimTemplates):
    owned by the host, kept while the host's workload is stopped or made again, deleted with
    the host."""

    metadata: ClaimTemplateMetadata = Field(description="The claim template's name.")
    spec: dict[str, Any] = Field(
        default_factory=dict,
        description="The PersistentVolumeClaim's spec (accessModes, resources, "
        "storageClassName), kept as written; the API server validates it when the operator "
        "creates a claim.",
    )


class WorkloadRef(ApiModel):
    """The workload a host stands for, in the host's namespace."""

    api_version: str = Field(
        min_length=1,
        max_length=MAX_NAME,
        pattern=API_VERSION_PATTERN,
        description="The workload's apiVersion, e.g. v1.",
    )
    kind: str = Field(
        min_length=1, max_length=63, pattern=KIND_PATTERN, description="The workload's kind."
    )
    name: str = Field(min_length=1, max_length=MAX_NAME, description="The workload's name.")
    address_from: str | None = Field(
        default=None,
        max_length=MAX_NAME,
        pattern=ADDRESS_FROM_PATTERN,
        description="Dotted path in the workload giving the host's address; absent means "
        "status.podIP.",
    )

    @property
    def group(self) -> str:
        """The API group ("" for the core group)."""
        return self.api_version.rpartition("/")[0]
