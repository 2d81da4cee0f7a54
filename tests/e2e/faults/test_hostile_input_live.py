"""Hostile input on the real API server, with the operator running; and its memory with
thousands of objects.

``test_generated_objects_are_refused_or_handled``: hypothesis generates HostPool,
SessionHost and SessionRequest bodies *from the CRDs' own schemas*: every field either valid
(boundaries included) or hostile (wrong type, out of range, huge, unicode, over-long), plus
unknown fields and bad names; and SessionHost status metrics as an agent would write them.
Each body goes to the API server: it is refused with a 4xx whose message names the field, or
accepted. With the operator running (under the chart's least-privilege identity), every
accepted object is then handled: the operator stays up, logs no error, traceback or token,
writes status for every accepted pool and host, and every accepted request ends Assigned or
Pending with a reason.

``test_memory_stays_bounded``: 2,000 hosts and 5,000 requests; the operator's peak resident
set size (VmHWM from /proc) stays under :data:`RSS_BOUND_MB`.
"""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from collections.abc import Iterator
from datetime import UTC
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from support import builders
from support.cluster import Cluster
from support.conditions import Obj, status
from support.identity import Identity, install_identity, leaked_secrets, remove_identity
from support.kube import CRD_DIR, OUTAGE, Kube, resource_path, wait_for
from support.operator_process import OperatorProcess
from support.storm import Storm

#: Generated objects per run (each is one POST, and for hosts sometimes a status patch).
EXAMPLES = 250
#: The operator's peak RSS with 2,000 hosts and 5,000 requests must stay under this
#: (measured: 68 MB idle, 120 MB peak on the two-core development machine).
RSS_BOUND_MB = 200

#: Fields whose *valid* range is narrowed: a valid pool asking for thousands of hosts
#: would have the operator create them all (that is what it is for), which is a load
#: test, not an input test. Out-of-range values are still generated.
NARROWED = {
    ".spec.scaling.minHosts": (0, 2),
    ".spec.scaling.maxHosts": (0, 3),
}

#: A refusal must name the field: "spec.x.y", "metadata.name", ".spec", "status.metrics"...
FIELD_IN_MESSAGE = re.compile(r"\b(spec|metadata|status)(\.[A-Za-z]+|\b)")

WRONG_TYPES: list[Any] = [None, True, False, "", "x", 0, 1, -1, 1.5, [], [1], {}, {"a": 1}]
HUGE_NUMBERS: list[Any] = [
    -1,
    0,
    2**31 - 1,
    2**31,
    2**53 + 1,
    2**63 - 1,
    -(2**63),
    2**64,
    10**30,
    1e300,
    -0.0,
    0.5,
]
UNICODE = st.text(alphabet=st.characters(codec="utf-8"), min_size=1, max_size=40)
LONG_STRINGS = st.sampled_from([254, 257, 1025, 8193, 20000]).flatmap(
    lambda n: st.sampled_from(["x" * n, "é" * n, "😀" * n, "ab\u202e" * (n // 3 + 1)])
)


def crd_schema(plural: str) -> dict[str, Any]:
    doc = yaml.safe_load((CRD_DIR / f"hostpool.io_{plural}.yaml").read_text())
    schema: dict[str, Any] = doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def hostile() -> st.SearchStrategy[Any]:
    return st.one_of(
        st.sampled_from(WRONG_TYPES),
        st.sampled_from(HUGE_NUMBERS),
        UNICODE,
        LONG_STRINGS,
        st.lists(st.integers(), max_size=3),
    )


def valid(node: dict[str, Any], path: str, p_bad: float) -> st.SearchStrategy[Any]:
    """A value the schema allows (boundaries more often than not), with hostile fields
    inside at rate ``p_bad`` when it is an object or array."""
    if "enum" in node:
        return st.sampled_from(node["enum"])
    kind = node.get("type")
    if kind == "integer":
        low, high = NARROWED.get(path, (node.get("minimum", -(2**31)), node.get("maximum", 2**31)))
        return st.one_of(st.sampled_from([low, high]), st.integers(low, high))
    if kind == "boolean":
        return st.booleans()
    if kind == "string":
        if node.get("format") == "date-time":
            return st.datetimes(timezones=st.just(UTC)).map(
                lambda d: d.isoformat().replace("+00:00", "Z")
            )
        high = node.get("maxLength", 64)
        low = node.get("minLength", 0)
        return st.one_of(
            st.text(min_size=low, max_size=min(high, 40)),
            st.just("y" * high) if high <= 10_000 else st.just("y"),
        )
    if kind == "array":
        items = node.get("items") or {}
        return st.lists(field(items, path + "[]", p_bad), max_size=node.get("maxItems", 4) + 1)
    if kind == "object":
        extra = node.get("additionalProperties")
        if isinstance(extra, dict):
            return st.dictionaries(
                st.text(min_size=1, max_size=20),
                field(extra, path + "{}", p_bad),
                max_size=3,
            )
        props = node.get("properties") or {}
        required = set(node.get("required") or [])
        return st.fixed_dictionaries(
            {k: field(v, f"{path}.{k}", p_bad) for k, v in props.items() if k in required},
            optional={
                **{
                    k: field(v, f"{path}.{k}", p_bad) for k, v in props.items() if k not in required
                },
                "unknownField": hostile(),
            },
        )
    return hostile()


def field(node: dict[str, Any], path: str, p_bad: float) -> st.SearchStrategy[Any]:
    """A valid value, or (with probability ``p_bad``) a hostile one."""
    if p_bad <= 0:
        return valid(node, path, p_bad)
    return st.integers(0, 99).flatmap(
        lambda roll: hostile() if roll < p_bad * 100 else valid(node, path, p_bad)
    )


POOLS = ["pool-bf", "pool-df", "pool-hz"]
KINDS = {
    "HostPool": "hostpools",
    "SessionHost": "sessionhosts",
    "SessionRequest": "sessionrequests",
}


@st.composite
def objects(draw: st.DrawFn) -> tuple[str, Obj, Obj | None]:
    """(kind, body, status metrics patch or None)."""
    kind = draw(st.sampled_from(list(KINDS)))
    p_bad = draw(st.sampled_from([0.0, 0.0, 0.05, 0.15, 0.5]))
    schema = crd_schema(KINDS[kind])
    spec = draw(field(schema["properties"]["spec"], ".spec", p_bad))
    if isinstance(spec, dict) and kind != "HostPool" and draw(st.integers(0, 9)) < 8:
        # mostly a pool that exists, so that placement is exercised
        ref = draw(st.sampled_from([*POOLS, "no-such-pool"]))
        spec["poolRef"] = {"name": ref}
    name = draw(
        st.one_of(
            st.from_regex(r"\A[a-z][a-z0-9]{0,10}\Z").map(lambda s: f"h-{s}"),
            st.sampled_from(["UPPER", "-dash", "a" * 254, "dot..dot", "ünï", ""]),
        )
        if p_bad
        else st.from_regex(r"\A[a-z][a-z0-9]{0,10}\Z").map(lambda s: f"h-{s}")
    )
    body = builders.manifest(kind, name, spec)
    metrics = None
    if kind == "SessionHost" and draw(st.booleans()):
        metrics_schema = schema["properties"]["status"]["properties"]["metrics"]
        metrics = draw(field(metrics_schema, ".status.metrics", p_bad))
    return kind, body, metrics


class Outcomes:
    def __init__(self) -> None:
        self.accepted: dict[str, list[str]] = {k: [] for k in KINDS}
        self.refused: Counter[str] = Counter()
        self.posts = 0
        self.metrics_accepted = 0
        self.metrics_refused = 0
        self.messages: list[str] = []
        self.seen: set[tuple[str, str]] = set()


@pytest.fixture
def identity(kube: Kube, namespace: str, tmp_path: Path) -> Iterator[Identity]:
    ident = install_identity(kube, namespace, tmp_path)
    try:
        yield ident
    finally:
        remove_identity(kube, ident)


def start_operator(identity: Identity, namespace: str, log: Path) -> OperatorProcess:
    op = OperatorProcess(identity.kubeconfig, namespace, log, extra_args=["--lease-duration", "3"])
    op.start()
    return op


def operator_clean(op: OperatorProcess, identity: Identity) -> None:
    text = op.log_text()
    assert op.running, f"the operator exited {op.exit_codes}:\n{op.log_tail(60)}"
    problems = op.problems()
    assert not problems, "\n".join(problems[:20]) + "\n" + op.log_tail(60)
    assert not leaked_secrets(identity, text)


def check_refusal(kind: str, body: Obj, code: int, answer: Any) -> str:
    message = str(answer.get("message") if isinstance(answer, dict) else answer)
    assert 400 <= code < 500, f"{kind} {json.dumps(body)[:800]}: HTTP {code}: {message[:800]}"
    assert FIELD_IN_MESSAGE.search(message), (
        f"{kind} refused without naming a field: HTTP {code}: {message[:800]}\n"
        f"{json.dumps(body)[:800]}"
    )
    return message


def test_generated_objects_are_refused_or_handled(
    kube: Kube, namespace: str, identity: Identity, tmp_path: Path, record_property: Any
) -> None:
    op = start_operator(identity, namespace, tmp_path / "operator.log")
    try:
        api = Cluster(Kube.connect(kube.kubeconfig, pool_size=16).through_outages(), namespace)
        api.create_body(builders.pool("pool-bf", "BreadthFirst", 50))
        api.create_body(builders.pool("pool-df", "DepthFirst", 2))
        api.create_body(builders.pool("pool-hz", "Horizon", 20))
        for pool in POOLS:
            api.create_body(builders.host(f"{pool}-host", pool))
        out = Outcomes()
        t0 = time.monotonic()

        @settings(
            max_examples=EXAMPLES,
            deadline=None,
            suppress_health_check=[
                HealthCheck.function_scoped_fixture,
                HealthCheck.too_slow,
                HealthCheck.data_too_large,
            ],
            database=None,
        )
        @given(objects())
        def send(item: tuple[str, Obj, Obj | None]) -> None:
            kind, body, metrics = item
            name = str(body["metadata"]["name"])
            if name.startswith("h-"):  # a valid name: make it unique (a namesake gets 409)
                name = body["metadata"]["name"] = f"{name}-{len(out.seen)}"
            out.seen.add((kind, name))
            out.posts += 1
            code, answer = kube.request("POST", resource_path(kind, namespace), body=body)
            if code == 409:
                out.refused["409 AlreadyExists (an invalid name drawn twice)"] += 1
                return
            if 200 <= code < 300:
                out.accepted[kind].append(name)
            else:
                out.refused[kind] += 1
                out.messages.append(check_refusal(kind, body, code, answer))
                return
            if metrics is not None:
                path = resource_path(kind, namespace, name) + "/status"
                patch = {"status": {"metrics": metrics}}
                code, answer = kube.request(
                    "PATCH", path, body=patch, content_type="application/merge-patch+json"
                )
                if 200 <= code < 300:
                    out.metrics_accepted += 1
                else:
                    out.metrics_refused += 1
                    out.messages.append(check_refusal(kind, patch, code, answer))

        send()
        sent = time.monotonic() - t0

        # The operator handled every accepted object: status on each pool and host, and a
        # phase with a reason on each request.
        def handled() -> list[str]:
            missing: list[str] = []
            for kind, names in out.accepted.items():
                items = api.objects(kind)
                for name in names:
                    obj = items.get(name)
                    if obj is None:
                        missing.append(f"{kind} {name}: gone")
                        continue
                    st_ = status(obj)
                    if kind == "SessionRequest":
                        reason = st_.get("reason") or next(
                            (
                                c.get("reason")
                                for c in st_.get("conditions") or []
                                if c.get("type") == "Assigned"
                            ),
                            None,
                        )
                        if st_.get("phase") not in ("Assigned", "Pending", "Failed") or not reason:
                            missing.append(f"{kind} {name}: {st_}")
                    elif st_.get("observedGeneration") != obj["metadata"]["generation"]:
                        missing.append(
                            f"{kind} {name}: no status for generation "
                            f"{obj['metadata']['generation']}: {st_}"
                        )
            return missing

        wait_for(
            lambda: not handled(),
            timeout=120,
            what="the operator to handle every accepted object",
            show=lambda: "\n".join(handled()[:20]),
            retry_on=OUTAGE,
        )
        requests = api.objects("SessionRequest")
        phases = Counter(
            f"{status(requests[n]).get('phase')}/{status(requests[n]).get('reason')}"
            for n in out.accepted["SessionRequest"]
        )
        failed = [
            n
            for n in out.accepted["SessionRequest"]
            if status(requests[n]).get("phase") == "Failed"
        ]
        # Accepted means valid: the CRD schema and the operator's models agree.
        assert not failed, {n: status(requests[n]) for n in failed}
        operator_clean(op, identity)
        api.kube.close()
    finally:
        op.stop(wait=False)
    summary = {
        "sent": out.posts,
        "accepted": {k: len(v) for k, v in out.accepted.items()},
        "refused": dict(out.refused),
        "metrics patches accepted": out.metrics_accepted,
        "metrics patches refused": out.metrics_refused,
        "request outcomes": dict(phases),
        "seconds": round(sent, 1),
    }
    record_property("hostile", json.dumps(summary))
    print(f"hostile input: {json.dumps(summary)}")
    print("sample refusals:\n" + "\n".join(sorted({m[:160] for m in out.messages})[:25]))


# ---------------------------------------------------------------------------------------
# memory with thousands of objects

POOL_COUNT = 20
HOSTS_PER_POOL = 100
REQUESTS_PER_POOL = 250


@pytest.mark.solo  # 5,000 sessions placed within a deadline: the machine's CPU, all of it
def test_memory_stays_bounded(
    kube: Kube, namespace: str, identity: Identity, tmp_path: Path, record_property: Any
) -> None:
    """20 BreadthFirst pools of 100 hosts (limit 3) and 250 requests each: 2,000 hosts and
    5,000 requests, created from 16 threads. Every request is placed, and the operator's
    peak resident set size (VmHWM) stays under RSS_BOUND_MB."""
    op = start_operator(identity, namespace, tmp_path / "operator.log")
    storm = Storm(kube.kubeconfig, namespace, threads=16)
    try:
        idle_kb = op.sample_memory()
        pools = [f"m{p:02d}" for p in range(POOL_COUNT)]
        storm.add(builders.pool(pool, "BreadthFirst", 3) for pool in pools)
        storm.wait()
        storm.add(
            builders.host(f"{pool}-h{h:03d}", pool) for h in range(HOSTS_PER_POOL) for pool in pools
        )
        t0 = time.monotonic()
        storm.wait(timeout=300)
        hosts_s = time.monotonic() - t0
        storm.add(
            builders.request(f"{pool}-r{r:03d}", pool, f"{pool}-u{r}@corp", namespace=namespace)
            for r in range(REQUESTS_PER_POOL)
            for pool in pools
        )
        t0 = time.monotonic()
        while len(storm.created) < storm.queued and time.monotonic() - t0 < 300:
            op.sample_memory()
            time.sleep(0.25)
        storm.wait(timeout=60)
        requests_s = time.monotonic() - t0
        api = Cluster(storm.kube, namespace)

        def placed() -> int:
            items = api.objects("HostPool")
            return sum(
                int((status(items[p]).get("sessions") or {}).get("total") or 0) for p in pools
            )

        def all_placed() -> bool:
            op.sample_memory()
            return placed() == POOL_COUNT * REQUESTS_PER_POOL

        wait_for(
            all_placed,
            timeout=180,
            what="5,000 sessions in the pools' status",
            show=lambda: f"{placed()} placed",
            interval=1.0,
            retry_on=OUTAGE,
        )
        requests = api.objects("SessionRequest")
        assert len(requests) == POOL_COUNT * REQUESTS_PER_POOL
        assert all(status(o).get("phase") == "Assigned" for o in requests.values())
        rss_kb, hwm_kb = op.memory_kb()
        peak_mb = max(op.peak_rss_kb, hwm_kb) / 1024
        operator_clean(op, identity)
    finally:
        storm.close()
        op.stop(wait=False)
    summary = {
        "hosts": POOL_COUNT * HOSTS_PER_POOL,
        "requests": POOL_COUNT * REQUESTS_PER_POOL,
        "idle_rss_mb": round(idle_kb / 1024, 1),
        "final_rss_mb": round(rss_kb / 1024, 1),
        "peak_rss_mb": round(peak_mb, 1),
        "hosts_created_s": round(hosts_s, 1),
        "requests_created_s": round(requests_s, 1),
    }
    record_property("memory", json.dumps(summary))
    print(f"memory: {json.dumps(summary)}")
    assert peak_mb < RSS_BOUND_MB, summary
