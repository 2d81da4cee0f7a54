"""The CRDs in ``crds/`` are exactly what the pydantic models generate, and they have the
shape the API contract demands (structural, bounded, documented, with the right names,
subresources and printer columns). The examples in ``crds/examples/`` are valid.

Bounds policy (what "every string has a maxLength" means here):

* every ``string`` has ``maxLength``, except
  - enums: the longest allowed value bounds them (the API server also uses that length for
    CEL cost estimates);
  - ``format: date-time``: the format bounds them (an RFC 3339 timestamp);
  - the root ``apiVersion`` and ``kind``: the API server itself checks that they name this
    CRD's group/version and kind before the schema is applied;
* every ``array`` has ``maxItems``, every map (``additionalProperties``) ``maxProperties``;
* every ``integer``/``number`` has both ``minimum`` and ``maximum``;
* every named property and every array's item schema has a ``description``; a map's value
  schema needs none (``kubectl explain`` shows the map's own description), nor does the root
  ``metadata``: the API server refuses a CRD that says anything about it except
  name/generateName restrictions ("metadata is implicitly specified");
* nothing escapes the schema: no ``x-kubernetes-preserve-unknown-fields`` (it would admit
  unbounded, unvalidated data), no ``additionalProperties: false`` (not structural), no
  ``$ref``/``$defs``/``anyOf``/``allOf``/``oneOf``/``not`` anywhere.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel, ValidationError

from hostpool_operator import api
from hostpool_operator.api import crdgen
from hostpool_operator.api.plan import DayOfWeek, ScalingPlanSpec
from support.kube import (
    CRD_DIR,
    EXAMPLES_DIR,
    example_documents,
    iter_schema_nodes,
    load_yaml_documents,
)

FORBIDDEN_KEYS = ("$ref", "$defs", "definitions", "anyOf", "allOf", "oneOf", "not")

SHORT_NAMES = {
    "HostPool": ["hp"],
    "SessionHost": ["sh"],
    "SessionRequest": ["sr"],
    "ScalingPlan": ["spl"],
}

REQUIRED_COLUMNS = {
    "HostPool": ["Type", "Hosts", "Updated", "Sessions", "Free", "Ready", "Age"],
    "SessionHost": ["Pool", "Sessions", "Load", "Drain", "Available"],
    "SessionRequest": ["Pool", "User", "Phase", "Host", "Reason"],
    "ScalingPlan": ["Pools", "Phase", "Ready", "Age"],
}

MODELS: dict[str, type[BaseModel]] = {
    "HostPool": api.HostPool,
    "SessionHost": api.SessionHost,
    "SessionRequest": api.SessionRequest,
    "ScalingPlan": api.ScalingPlan,
}


@functools.cache
def _generated() -> dict[str, dict[str, Any]]:
    """File name -> parsed CRD, as generated from the models."""
    return {name: yaml.safe_load(text) for name, text in crdgen.render_all().items()}


def _crd_by_kind() -> dict[str, dict[str, Any]]:
    return {crd["spec"]["names"]["kind"]: crd for crd in _generated().values()}


def _version(crd: dict[str, Any]) -> dict[str, Any]:
    versions: list[dict[str, Any]] = crd["spec"]["versions"]
    assert len(versions) == 1, "one served version, v1alpha1"
    return versions[0]


def _schema(crd: dict[str, Any]) -> dict[str, Any]:
    schema: dict[str, Any] = _version(crd)["schema"]["openAPIV3Schema"]
    return schema


def _walk_keys(node: Any, path: str = "") -> list[tuple[str, str, Any]]:
    """Every (path, key, value) of every mapping in a nested document."""
    found: list[tuple[str, str, Any]] = []
    if isinstance(node, dict):
        for key, value in node.items():
            found.append((path, str(key), value))
            found.extend(_walk_keys(value, f"{path}/{key}"))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            found.extend(_walk_keys(value, f"{path}[{i}]"))
    return found


KINDS = sorted(SHORT_NAMES)


# ---------------------------------------------------------------------------------------
# Drift


def test_crd_files_match_the_models() -> None:
    expected = crdgen.render_all()
    on_disk = {path.name: path.read_text(encoding="utf-8") for path in CRD_DIR.glob("*.yaml")}
    missing = sorted(set(expected) - set(on_disk))
    extra = sorted(set(on_disk) - set(expected))
    stale = sorted(name for name in set(expected) & set(on_disk) if expected[name] != on_disk[name])
    drift = missing + extra + stale
    assert not drift, (
        "crds/ is out of date with hostpool_operator.api; run `make crds` and commit the result "
        f"(missing: {missing}, not generated: {extra}, differing: {stale})"
    )


def test_every_kind_has_one_crd() -> None:
    assert sorted(_crd_by_kind()) == KINDS
    for crd in _generated().values():
        names = crd["spec"]["names"]
        assert crd["metadata"]["name"] == f"{names['plural']}.{api.GROUP}"
        assert crd["spec"]["group"] == api.GROUP
        assert crd["spec"]["scope"] == "Namespaced"
        version = _version(crd)
        assert version["name"] == api.VERSION
        assert version["served"] is True
        assert version["storage"] is True


# ---------------------------------------------------------------------------------------
# Structural schema


#: The two places a schema stays open: a workload's own spec and a claim template's, kept as
#: written for their kinds' API server to validate when the operator creates them.
OPEN_BY_DESIGN = {
    "/properties/spec/properties/scaling/properties/hostTemplate/properties/workload"
    "/properties/spec",
    "/properties/spec/properties/scaling/properties/hostTemplate/properties"
    "/volumeClaimTemplates/items/properties/spec",
}


@pytest.mark.parametrize("kind", KINDS)
def test_schema_has_no_forbidden_constructs(kind: str) -> None:
    schema = _schema(_crd_by_kind()[kind])
    problems = []
    for path, key, value in _walk_keys(schema):
        # "properties" maps field names to schemas, so a *field* could be named like a
        # keyword; only keys of schema nodes count.
        if path.endswith("/properties"):
            continue
        if key in FORBIDDEN_KEYS:
            problems.append(f"{path}: {key}")
        if key == "additionalProperties" and value is False:
            problems.append(f"{path}: additionalProperties: false")
        if key == "x-kubernetes-preserve-unknown-fields" and path not in OPEN_BY_DESIGN:
            problems.append(f"{path}: x-kubernetes-preserve-unknown-fields")
    assert not problems, f"{kind}: not structural or not closed:\n" + "\n".join(problems)


@pytest.mark.parametrize("kind", KINDS)
def test_every_node_is_typed_and_described(kind: str) -> None:
    schema = _schema(_crd_by_kind()[kind])
    # An int-or-string (update.maxSurge, maxUnavailable) is the one node typed by its marker.
    untyped = [
        p or "<root>"
        for p, node in iter_schema_nodes(schema)
        if "type" not in node and not node.get("x-kubernetes-int-or-string")
    ]
    assert not untyped, f"{kind}: schema nodes without a type: {untyped}"
    undescribed = [
        p or "<root>"
        for p, node in iter_schema_nodes(schema)
        if "description" not in node and not p.endswith("{}") and p != ".metadata"
    ]
    assert not undescribed, f"{kind}: properties without a description: {undescribed}"


def _root_exempt(path: str) -> bool:
    return path in (".apiVersion", ".kind")


@pytest.mark.parametrize("kind", KINDS)
def test_every_value_is_bounded(kind: str) -> None:
    schema = _schema(_crd_by_kind()[kind])
    problems = []
    for path, node in iter_schema_nodes(schema):
        kind_of = node.get("type")
        if kind_of == "string":
            bounded = "maxLength" in node or "enum" in node or node.get("format") == "date-time"
            if not bounded and not _root_exempt(path):
                problems.append(f"{path}: string without maxLength")
        elif kind_of == "array":
            if "maxItems" not in node:
                problems.append(f"{path}: array without maxItems")
        elif kind_of in ("integer", "number"):
            if "minimum" not in node or "maximum" not in node:
                problems.append(f"{path}: {kind_of} without minimum and maximum")
        elif (
            kind_of == "object"
            and isinstance(node.get("additionalProperties"), dict)
            and "maxProperties" not in node
        ):
            problems.append(f"{path}: map without maxProperties")
    assert not problems, f"{kind}: unbounded values:\n" + "\n".join(problems)


@pytest.mark.parametrize("kind", KINDS)
def test_every_validation_rule_has_a_message(kind: str) -> None:
    for path, node in iter_schema_nodes(_schema(_crd_by_kind()[kind])):
        for rule in node.get("x-kubernetes-validations", []):
            assert rule.get("rule"), f"{kind} {path}: empty rule {rule}"
            assert rule.get("message"), f"{kind} {path}: rule without a message {rule}"


def test_status_carries_no_defaults() -> None:
    """Only the operator and agents write status; defaults there would mask missing data."""
    for kind, crd in _crd_by_kind().items():
        status = _schema(crd)["properties"]["status"]
        defaulted = [p for p, node in iter_schema_nodes(status, ".status") if "default" in node]
        assert not defaulted, f"{kind}: defaults in status: {defaulted}"


def test_spec_is_required() -> None:
    for kind, crd in _crd_by_kind().items():
        assert "spec" in _schema(crd).get("required", []), kind


# ---------------------------------------------------------------------------------------
# Names, subresources, printer columns


@pytest.mark.parametrize("kind", KINDS)
def test_short_names(kind: str) -> None:
    assert _crd_by_kind()[kind]["spec"]["names"]["shortNames"] == SHORT_NAMES[kind]


@pytest.mark.parametrize("kind", KINDS)
def test_status_subresource(kind: str) -> None:
    assert _version(_crd_by_kind()[kind]).get("subresources", {}).get("status") == {}


def test_scale_subresource_of_host_pools_only() -> None:
    """HostPool has /scale (kubectl scale sets its minimum); the other kinds do not."""
    for kind in KINDS:
        subresources = _version(_crd_by_kind()[kind])["subresources"]
        if kind != "HostPool":
            assert "scale" not in subresources, kind
    scale = _version(_crd_by_kind()["HostPool"])["subresources"]["scale"]
    assert scale == {
        "specReplicasPath": ".spec.scaling.minHosts",
        "statusReplicasPath": ".status.hosts.total",
        "labelSelectorPath": ".status.selector",
    }
    # Each path names an integer (replicas) or a string (selector) field of the schema.
    schema = _schema(_crd_by_kind()["HostPool"])
    for path, kind_ in (
        ("spec.scaling.minHosts", "integer"),
        ("status.hosts.total", "integer"),
        ("status.selector", "string"),
    ):
        node = schema
        for part in path.split("."):
            node = node["properties"][part]
        assert node["type"] == kind_, path


@pytest.mark.parametrize("kind", KINDS)
def test_printer_columns(kind: str) -> None:
    columns = _version(_crd_by_kind()[kind]).get("additionalPrinterColumns", [])
    names = [c["name"] for c in columns]
    missing = [c for c in REQUIRED_COLUMNS[kind] if c not in names]
    assert not missing, f"{kind}: printer columns {missing} missing (have {names})"
    assert len(names) == len(set(names)), f"{kind}: duplicate printer columns {names}"
    schema = _schema(_crd_by_kind()[kind])
    for column in columns:
        assert column["type"] in ("string", "integer", "number", "boolean", "date"), column
        path = column["jsonPath"]
        assert path.startswith("."), column
        if path == ".metadata.creationTimestamp":
            continue
        # The column's path (filters and all) must lead to a field the schema knows.
        node = schema
        for part in path.split("[")[0].strip(".").split("."):
            assert part in node.get("properties", {}), f"{kind}: column {column} -> {part}?"
            node = node["properties"][part]
            if node.get("type") == "array":
                node = node["items"]


def test_categories_do_not_shadow_resource_names() -> None:
    names: set[str] = set()
    for crd in _generated().values():
        n = crd["spec"]["names"]
        names |= {n["plural"], n["singular"], n["kind"].lower(), *n.get("shortNames", [])}
    for crd in _generated().values():
        clashes = names & set(crd["spec"]["names"].get("categories", []))
        assert not clashes, f"categories that kubectl resolves before the resource: {clashes}"


def test_protocols_and_conditions_list_types() -> None:
    host = _schema(_crd_by_kind()["SessionHost"])
    protocols = host["properties"]["spec"]["properties"]["features"]["properties"]["protocols"]
    assert protocols["x-kubernetes-list-type"] == "set"
    for kind, crd in _crd_by_kind().items():
        conditions = _schema(crd)["properties"]["status"]["properties"]["conditions"]
        assert conditions["x-kubernetes-list-type"] == "map", kind
        assert conditions["x-kubernetes-list-map-keys"] == ["type"], kind


def test_plan_fields_of_the_status() -> None:
    """A plan's status says the schedule and phase in force; a pool's status the plan it
    follows (both optional: absent until the operator writes them)."""
    plan = _schema(_crd_by_kind()["ScalingPlan"])["properties"]["status"]
    assert {"schedule", "phase", "pools", "conditions"} <= set(plan["properties"])
    assert plan["properties"]["phase"]["enum"] == ["RampUp", "Peak", "RampDown", "OffPeak"]
    assert "required" not in plan
    pool = _schema(_crd_by_kind()["HostPool"])["properties"]["status"]["properties"]
    follows = pool["scalingPlan"]
    assert set(follows["properties"]) == {"name", "schedule", "phase", "loadBalancerType"}
    assert follows["required"] == ["name"]
    assert follows["properties"]["loadBalancerType"]["enum"] == [
        "BreadthFirst",
        "DepthFirst",
        "Horizon",
    ]


def test_the_pools_column_shows_every_pool() -> None:
    """A Table cell holds the first match of its path only: `.spec.hostPoolRefs[*].name`
    would show one pool of several. The column shows the list itself."""
    columns = _version(_crd_by_kind()["ScalingPlan"])["additionalPrinterColumns"]
    (pools,) = [c for c in columns if c["name"] == "Pools"]
    assert pools["jsonPath"] == ".spec.hostPoolRefs"


# ---------------------------------------------------------------------------------------
# Examples


def test_examples_exist() -> None:
    names = {p.name for p in EXAMPLES_DIR.glob("*.yaml")}
    assert {
        "breadth-first-pool.yaml",
        "depth-first-pool.yaml",
        "horizon-pool.yaml",
        "session-hosts.yaml",
        "session-requests.yaml",
        "scaling-plan.yaml",
    } <= names
    kinds = [doc["kind"] for _, doc in example_documents()]
    assert kinds.count("HostPool") >= 3
    assert kinds.count("SessionHost") >= 3
    assert kinds.count("SessionRequest") >= 3
    assert kinds.count("ScalingPlan") >= 1
    assert set(kinds) == set(MODELS), "an example for every kind"


EXAMPLES = example_documents()


@pytest.mark.parametrize(
    ("path", "doc"),
    [
        pytest.param(p, d, id=f"{p.name}:{d.get('metadata', {}).get('name', '?')}")
        for p, d in EXAMPLES
    ],
)
def test_example_is_valid(path: Path, doc: dict[str, Any]) -> None:
    assert doc.get("apiVersion") == api.API_VERSION, path
    assert doc.get("kind") in MODELS, path
    metadata = doc.get("metadata", {})
    assert metadata.get("name"), f"{path}: every example needs metadata.name"
    assert "namespace" not in metadata, f"{path}: examples carry no namespace"
    assert "status" not in doc, f"{path}: examples carry no status"
    model = MODELS[doc["kind"]]
    try:
        model.model_validate({"spec": doc["spec"]})
    except ValidationError as exc:  # pragma: no cover - the message is the point
        pytest.fail(f"{path} {metadata['name']}: {exc}")


def test_examples_cover_the_features() -> None:
    docs = [d for _, d in EXAMPLES]
    pooled = [d for d in docs if d["kind"] == "HostPool" and "loadBalancer" in d["spec"]]
    pools = {d["spec"]["loadBalancer"]["type"]: d["spec"] for d in pooled}
    assert set(pools) == {"BreadthFirst", "DepthFirst", "Horizon"}
    # A personal pool: no load balancer, a claim per host mounted in the desktop container.
    (personal,) = [d["spec"] for d in docs if d["spec"].get("type") == "Personal"]
    assert "loadBalancer" not in personal
    template = personal["scaling"]["hostTemplate"]
    (claim,) = template["volumeClaimTemplates"]
    mounts = [
        m["name"] for c in template["workload"]["spec"]["containers"] for m in c["volumeMounts"]
    ]
    assert claim["metadata"]["name"] in mounts
    assert "maxSessionLimit" in pools["DepthFirst"]["loadBalancer"]
    assert "hostTemplate" in pools["DepthFirst"]["scaling"]
    limited = [d["spec"]["sessionLimits"] for d in docs if "sessionLimits" in d.get("spec", {})]
    assert limited, "no pool example with sessionLimits"
    assert {"disconnectedMinutes", "idleMinutes", "maxSessionMinutes"} <= set(limited[0])
    # One Horizon example shows every setting (others may show a few).
    complete = [
        d["spec"]["horizon"]
        for d in docs
        if d["kind"] == "HostPool"
        and set(d["spec"].get("horizon", {})) == {"loadIndex", "logonStorm", "connectionServer"}
    ]
    assert complete, "no Horizon example with loadIndex, logonStorm and connectionServer"
    horizon = complete[0]
    for block, model in (
        ("loadIndex", api.LoadIndexSettings),
        ("logonStorm", api.LogonStorm),
        ("connectionServer", api.ConnectionServer),
    ):
        fields = {f.alias or n for n, f in model.model_fields.items()}
        assert set(horizon[block]) == fields, f"horizon.{block} is not complete"
    hosts = [d["spec"] for d in docs if d["kind"] == "SessionHost"]
    assert any(h.get("drainMode") for h in hosts)
    assert any("address" in h for h in hosts)
    assert any(set(h) == {"poolRef"} for h in hosts), "one host with every default"
    requests = [d["spec"] for d in docs if d["kind"] == "SessionRequest"]
    assert any("protocol" in r for r in requests)
    assert any(r.get("unauthenticated") for r in requests)
    # Every host and request refers to a pool by name; the examples' pools exist (except
    # one request that shows a missing pool on purpose).
    pool_names = {d["metadata"]["name"] for d in docs if d["kind"] == "HostPool"}
    assert all(h["poolRef"]["name"] in pool_names for h in hosts)
    assert sum(r["poolRef"]["name"] not in pool_names for r in requests) <= 1


def test_the_example_plan_fits_its_pools() -> None:
    """The plan's pools exist among the examples and have what a plan needs (otherwise the
    operator reports ScalingRequired): scaling with maxHosts and an explicit
    maxSessionLimit; the schedules cover the whole week, each day once."""
    docs = [d for _, d in EXAMPLES]
    pools = {d["metadata"]["name"]: d["spec"] for d in docs if d["kind"] == "HostPool"}
    (plan,) = [d["spec"] for d in docs if d["kind"] == "ScalingPlan"]
    for ref in plan["hostPoolRefs"]:
        spec = pools[ref["name"]]
        assert "maxSessionLimit" in spec["loadBalancer"], ref
        assert spec["scaling"]["maxHosts"] >= 1, ref
    days = [d for schedule in plan["schedules"] for d in schedule["daysOfWeek"]]
    assert sorted(days) == sorted(day.value for day in DayOfWeek)
    assert len(plan["schedules"]) >= 2
    assert plan["timeZone"] == "Europe/Stockholm"
    spec = ScalingPlanSpec.model_validate(plan)
    assert spec.zone.key == "Europe/Stockholm"


def test_example_documents_are_separate_files_per_kind() -> None:
    for path in EXAMPLES_DIR.glob("*.yaml"):
        kinds = {d["kind"] for d in load_yaml_documents(path)}
        assert len(kinds) == 1, f"{path.name} mixes kinds {kinds}"
