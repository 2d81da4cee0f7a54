"""Generate the CustomResourceDefinitions in ``crds/`` from the pydantic models in ``api``.

Kubernetes wants *structural* schemas: every node typed, no ``$ref``/``$defs``, no untyped
``anyOf``, no ``additionalProperties: false``. Pydantic's JSON schema is close; this module
inlines references, unwraps ``X | None`` into ``X``, evaluates ``default_factory`` defaults
(so the API server fills them in), and adds what only a CRD has: names, printer columns, the
status subresource (and HostPool's scale subresource).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import core_schema

from .. import api

_DROP_KEYS = {"title", "additionalProperties"}


class _FactoryDefaults(GenerateJsonSchema):
    """Emit defaults produced by ``default_factory`` too (pydantic leaves them out)."""

    def default_schema(self, schema: core_schema.WithDefaultSchema) -> JsonSchemaValue:
        factory = schema.get("default_factory")
        if factory is not None and not schema.get("default_factory_takes_data"):
            value = factory()  # type: ignore[call-arg]
            if isinstance(value, BaseModel):
                value = value.model_dump(by_alias=True, mode="json", exclude_none=True)
            schema = {**schema, "default": value}
            schema.pop("default_factory")
        return super().default_schema(schema)


def _resolve(node: Any, defs: dict[str, Any]) -> Any:
    """Inline ``$ref``s and unwrap ``anyOf: [X, null]``, recursively."""
    if isinstance(node, list):
        return [_resolve(item, defs) for item in node]
    if not isinstance(node, dict):
        return node
    node = dict(node)
    if "$ref" in node:
        target = defs[node.pop("$ref").rsplit("/", 1)[-1]]
        # The field's own keys (description, default) win over the referenced model's.
        node = {**target, **node}
    if "anyOf" in node:
        options = [o for o in node.pop("anyOf") if o.get("type") != "null"]
        if len(options) != 1:
            raise ValueError(f"cannot make a structural schema of anyOf {options!r}")
        inner = options[0]
        if "$ref" in inner:
            inner = {**defs[inner["$ref"].rsplit("/", 1)[-1]]}
        node = {**inner, **node}
    if node.get("default", 0) is None:
        node.pop("default")  # "absent" (a field that is only optional to some rule)
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROP_KEYS:
            continue
        if key == "properties":
            out[key] = {name: _resolve(sub, defs) for name, sub in value.items()}
        elif key in ("items", "additionalProperties"):
            out[key] = _resolve(value, defs)
        else:
            out[key] = value
    if isinstance(node.get("additionalProperties"), dict):
        out["additionalProperties"] = _resolve(node["additionalProperties"], defs)
    untyped_object = out.get("type") == "object" and "properties" not in out
    if untyped_object and "additionalProperties" not in out:
        out["x-kubernetes-preserve-unknown-fields"] = True
    return out


def _tidy_defaults(node: dict[str, Any], *, in_status: bool) -> None:
    """Defaults for spec objects become ``{}`` (the server fills in nested defaults);
    status carries no defaults at all: only the operator and agents write it."""
    if in_status:
        node.pop("default", None)
    elif node.get("type") == "object" and isinstance(node.get("default"), dict):
        node["default"] = {}
    for name, sub in node.get("properties", {}).items():
        _tidy_defaults(sub, in_status=in_status)
        # Conditions merge by type (server-side apply); protocols are a set (no duplicates).
        if name == "conditions" and sub.get("type") == "array":
            sub["x-kubernetes-list-type"] = "map"
            sub["x-kubernetes-list-map-keys"] = ["type"]
        elif name == "protocols" and sub.get("type") == "array":
            sub["x-kubernetes-list-type"] = "set"
    if isinstance(node.get("items"), dict):
        _tidy_defaults(node["items"], in_status=in_status)
    if isinstance(node.get("additionalProperties"), dict):
        _tidy_defaults(node["additionalProperties"], in_status=in_status)


def _ensure_descriptions(node: dict[str, Any], path: str) -> None:
    if "description" not in node:
        raise ValueError(f"{path} has no description; every field must teach kubectl explain")
    for name, sub in node.get("properties", {}).items():
        if name == "metadata" and "." not in path:
            continue  # the root metadata: described by the API server, see object_schema
        _ensure_descriptions(sub, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        items = node["items"]
        items.setdefault("description", node["description"])
        _ensure_descriptions(items, f"{path}[]")


def object_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The structural openAPIV3Schema of one kind's model."""
    raw = model.model_json_schema(
        by_alias=True, mode="validation", schema_generator=_FactoryDefaults
    )
    defs = raw.pop("$defs", {})
    schema: dict[str, Any] = _resolve(raw, defs)
    for part in ("spec", "status"):
        _tidy_defaults(schema["properties"][part], in_status=part == "status")
    schema["properties"]["status"].pop("default", None)
    schema["properties"]["spec"].pop("default", None)
    props = {
        "apiVersion": {
            "type": "string",
            "description": "The versioned schema of this object: hostpool.io/v1alpha1.",
        },
        "kind": {"type": "string", "description": f"Always {model.__name__}."},
        # The API server refuses anything on the root metadata except name/generateName
        # restrictions, a description included ("metadata is implicitly specified").
        "metadata": {"type": "object"},
        **schema["properties"],
    }
    schema["properties"] = props
    schema["required"] = ["spec"]
    _ensure_descriptions(schema, model.__name__)
    return schema


def _condition_column(name: str, condition: str) -> dict[str, Any]:
    return {
        "name": name,
        "type": "string",
        "jsonPath": f'.status.conditions[?(@.type=="{condition}")].status',
        "description": f"Status of the {condition} condition.",
    }


def _column(name: str, kind: str, path: str, description: str) -> dict[str, Any]:
    return {"name": name, "type": kind, "jsonPath": path, "description": description}


_AGE = {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}

PRINTER_COLUMNS: dict[str, list[dict[str, Any]]] = {
    "HostPool": [
        _column("Type", "string", ".spec.loadBalancer.type", "Load-balancing algorithm."),
        _column("Limit", "integer", ".spec.loadBalancer.maxSessionLimit", "Session limit."),
        {
            **_column("Kind", "string", ".spec.type", "Pooled or Personal."),
            "priority": 1,
        },
        _column("Hosts", "integer", ".status.hosts.total", "Hosts in the pool."),
        _column(
            "Updated",
            "integer",
            ".status.update.updatedHosts",
            "Hosts made from the current host template (of Hosts).",
        ),
        {
            **_column("Update", "string", ".status.update.phase", "The image update's phase."),
            "priority": 1,
        },
        _column("Sessions", "integer", ".status.sessions.total", "Sessions in the pool."),
        _column("Free", "integer", ".status.capacity.free", "Free session slots."),
        _column("Pending", "integer", ".status.pendingRequests", "Requests waiting."),
        _condition_column("Ready", "Ready"),
        {
            **_column(
                "Groups",
                "string",
                ".spec.entitlements.groups",
                "The groups entitled to connect through the broker.",
            ),
            "priority": 1,
        },
        _AGE,
    ],
    "SessionHost": [
        _column("Pool", "string", ".spec.poolRef.name", "The host's pool."),
        _column("Sessions", "integer", ".status.sessions.total", "Sessions on the host."),
        _column("Load", "integer", ".status.loadIndex", "Load index (-1..100)."),
        _column("Drain", "boolean", ".spec.drainMode", "Drain mode."),
        _condition_column("Available", "Available"),
        _column("Address", "string", ".status.address", "The address handed to clients."),
        {
            **_column("User", "string", ".spec.assignedUser", "Personal pools: the host's user."),
            "priority": 1,
        },
        {
            **_column("Power", "string", ".status.power", "Personal pools: Running or Stopped."),
            "priority": 1,
        },
        {
            **_column(
                "Reason",
                "string",
                '.status.conditions[?(@.type=="Available")].reason',
                "Why the host takes new sessions or not (e.g. WorkloadNotReady).",
            ),
            "priority": 1,
        },
        _AGE,
    ],
    "SessionRequest": [
        _column("Pool", "string", ".spec.poolRef.name", "The requested pool."),
        _column("User", "string", ".spec.user", "The user."),
        _column("Phase", "string", ".status.phase", "Pending, Assigned or Failed."),
        _column("Host", "string", ".status.host", "The assigned host."),
        _column("Reason", "string", ".status.reason", "Why placed there, or why pending."),
        _AGE,
    ],
    "ScalingPlan": [
        # A Table cell shows the first match of a path only, so the pools are shown as the
        # list itself (JSON), which names every pool.
        _column("Pools", "string", ".spec.hostPoolRefs", "The HostPools that follow the plan."),
        _column("Phase", "string", ".status.phase", "The phase in force now."),
        _condition_column("Ready", "Ready"),
        {
            **_column("Schedule", "string", ".status.schedule", "The schedule in force now."),
            "priority": 1,
        },
        {**_column("Zone", "string", ".spec.timeZone", "The plan's time zone."), "priority": 1},
        _AGE,
    ],
}


#: The /scale subresource, per kind that has one: `kubectl scale hp NAME --replicas N` sets
#: the pool's minimum (the hosts kept warm); replicas read back as the pool's host count, and
#: the selector as the label of the hosts the operator created for it.
SCALE_SUBRESOURCES: dict[str, dict[str, str]] = {
    "HostPool": {
        "specReplicasPath": ".spec.scaling.minHosts",
        "statusReplicasPath": ".status.hosts.total",
        "labelSelectorPath": ".status.selector",
    },
}


#: Fields `kubectl get --field-selector` (and the host agent) can filter on, per kind.
SELECTABLE_FIELDS: dict[str, list[str]] = {
    "HostPool": [],
    "SessionHost": [".spec.poolRef.name"],
    "SessionRequest": [".spec.poolRef.name", ".status.host", ".status.phase"],
    "ScalingPlan": [],
}


def crd(model: api.KindModel) -> dict[str, Any]:
    """The whole CustomResourceDefinition of one kind."""
    schema = object_schema(model)
    if model is api.SessionRequest:
        schema["properties"]["spec"]["x-kubernetes-validations"] = list(
            api.SessionRequest.spec_validations
        )
    kind = model.kind
    subresources: dict[str, Any] = {"status": {}}
    if kind in SCALE_SUBRESOURCES:
        subresources["scale"] = dict(SCALE_SUBRESOURCES[kind])
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{model.plural}.{api.GROUP}"},
        "spec": {
            "group": api.GROUP,
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": model.plural,
                "singular": kind.lower(),
                "shortNames": list(model.short_names),
                "categories": ["hostpool-all"],
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": api.VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": subresources,
                    "additionalPrinterColumns": PRINTER_COLUMNS[kind],
                    "schema": {"openAPIV3Schema": schema},
                    **(
                        {"selectableFields": [{"jsonPath": p} for p in SELECTABLE_FIELDS[kind]]}
                        if SELECTABLE_FIELDS[kind]
                        else {}
                    ),
                }
            ],
        },
    }


class _PlainDumper(yaml.SafeDumper):
    """Writes a value shared by two schema nodes (an enum's list of values) out twice
    instead of as a YAML anchor and alias: the files stay plain to read and to diff."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def render_all() -> dict[str, str]:
    """File name -> YAML text for every CRD."""
    header = "# Generated from hostpool_operator.api by `hostpool-operator crds`. Do not edit.\n"
    return {
        f"{api.GROUP}_{model.plural}.yaml": header
        + yaml.dump(crd(model), Dumper=_PlainDumper, sort_keys=False, width=100)
        for model in api.KINDS
    }


def write_all(directory: Path) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in render_all().items():
        path = directory / name
        path.write_text(text)
        written.append(path)
    return written
