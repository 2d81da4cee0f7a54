"""Scaling plans end to end, on the real clock: the operator places with the phase's
algorithm and switches at the phase boundary, creates the minimum, adds hosts over the
threshold, drains and removes the emptiest hosts in ramp-down, writes forced logoffs with
their deadline, ends Disconnected sessions for ZeroActiveSessions, reports conflicts and bad
plans, and hands a pool back to its own settings when its plan goes. Throughout, no request
is lost or moved and no host goes over its limit.

Plans are built around the current time: one schedule for every day, in a fixed-offset
zone (``Etc/GMT-N``) chosen so that local time is near noon, with the phase wanted in force
now (it began an hour ago) and the next one hours away, or a minute or two away where a test
waits for the boundary.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

import pytest

from e2e import test_workloads_live as workloads
from support.admission import host_updates_refused
from support.cluster import Cluster
from support.conditions import cond_is, count_by_host, host_of, parse_time, phase, status
from support.kube import Kube
from support.operator_process import OperatorProcess
from support.recorder import RequestRecorder

POOL = "desk"
MANAGED = "hostpool.io/managed-by"
DRAINED = "hostpool.io/drained-by-plan"
PHASES = ("rampUp", "peak", "rampDown", "offPeak")


def local_zone(now: datetime) -> tuple[str, timedelta]:
    """A fixed-offset zone in which ``now`` is between 12:00 and 13:00 local time, and its
    offset (Etc/GMT-N is UTC+N)."""
    hours = 12 - now.hour
    if hours > 14:
        hours -= 24
    elif hours < -12:
        hours += 24
    name = "Etc/GMT" if hours == 0 else f"Etc/GMT{-hours:+d}"
    return name, timedelta(hours=hours)


def hhmm(moment: datetime) -> str:
    return moment.strftime("%H:%M")


def plan_spec(
    current: str,
    *,
    pools: list[str],
    switch_in: timedelta | None = None,
    now: datetime | None = None,
    **phases: dict[str, Any],
) -> dict[str, Any]:
    """A plan whose phase ``current`` (rampUp, peak, rampDown, offPeak) is in force now,
    since an hour ago; the next phase starts ``switch_in`` from now (default: hours away).
    ``phases`` add settings per phase (e.g. ``rampDown={"minimumHostsPercent": 0}``)."""
    now = now or datetime.now(UTC)
    zone, offset = local_zone(now)
    local = (now + offset).replace(second=0, microsecond=0, tzinfo=None)
    index = PHASES.index(current)
    starts: dict[str, datetime] = {}
    for i, name in enumerate(PHASES):
        if i <= index:
            starts[name] = local - timedelta(hours=index - i + 1)
        elif i == index + 1 and switch_in is not None:
            starts[name] = (now + offset + switch_in).replace(second=0, tzinfo=None)
        else:
            starts[name] = local + timedelta(hours=2 * (i - index) + 1)
    schedule: dict[str, Any] = {
        "name": "everyday",
        "daysOfWeek": [
            "Monday",
            "Tuesday",
            "Wednesday",
            "Thursday",
            "Friday",
            "Saturday",
            "Sunday",
        ],
    }
    defaults: dict[str, dict[str, Any]] = {
        "rampUp": {
            "loadBalancerType": "BreadthFirst",
            "minimumHostsPercent": 0,
            "capacityThresholdPercent": 100,
        },
        "peak": {"loadBalancerType": "BreadthFirst"},
        "rampDown": {
            "loadBalancerType": "DepthFirst",
            "minimumHostsPercent": 0,
            "capacityThresholdPercent": 100,
        },
        "offPeak": {"loadBalancerType": "DepthFirst"},
    }
    for name in PHASES:
        schedule[name] = {"startTime": hhmm(starts[name]), **defaults[name], **phases.get(name, {})}
    return {
        "timeZone": zone,
        "hostPoolRefs": [{"name": pool} for pool in pools],
        "schedules": [schedule],
    }


def next_boundary(now: datetime) -> timedelta:
    """From ``now`` to a whole minute at least 20 s away (the earliest boundary a plan can
    name that the test still sees coming)."""
    minute = now.replace(second=0, microsecond=0) + timedelta(minutes=1)
    if (minute - now).total_seconds() < 20:
        minute += timedelta(minutes=1)
    return minute - now


def scaling(max_hosts: int, **kw: Any) -> dict[str, Any]:
    return {
        "minHosts": 0,
        "maxHosts": max_hosts,
        "scaleDownDelaySeconds": 3600,
        "hostTemplate": {"metadata": {"labels": {"tier": "planned"}}},
        **kw,
    }


def managed(cluster: Cluster) -> dict[str, dict[str, Any]]:
    return {
        name: h
        for name, h in cluster.hosts().items()
        if h["metadata"].get("labels", {}).get(MANAGED) == "hostpool-operator"
    }


def in_query_order(hosts: dict[str, dict[str, Any]]) -> list[str]:
    return sorted(hosts, key=lambda n: (hosts[n]["metadata"]["creationTimestamp"], n))


def peak_at_full_minimum(cluster: Cluster, algorithm: str, limit: int, max_hosts: int) -> list[str]:
    """A pool with no host of its own under a plan in Peak whose minimum is 100 % of
    maxHosts: waits for the operator to create and report every host; their names in query
    order."""
    cluster.setup_pool(POOL, algorithm, limit, scaling=scaling(max_hosts))
    cluster.create(
        "ScalingPlan",
        "office",
        plan_spec("peak", pools=[POOL], rampUp={"minimumHostsPercent": 100}),
    )
    cluster.wait(
        lambda: len(managed(cluster)) == max_hosts or None, f"{max_hosts} hosts (the minimum)"
    )
    cluster.wait(
        lambda: all(status(h).get("conditions") for h in managed(cluster).values()) or None,
        "the operator to report the new hosts",
    )
    return in_query_order(managed(cluster))


def pool_plan(cluster: Cluster, pool: str = POOL) -> dict[str, Any] | None:
    value = status(cluster.pool(pool)).get("scalingPlan")
    return value if isinstance(value, dict) else None


def plan_ready(plan: dict[str, Any]) -> dict[str, Any] | None:
    for c in status(plan).get("conditions") or []:
        if c.get("type") == "Ready":
            return dict(c)
    return None


def when(obj: dict[str, Any], check: Callable[[dict[str, Any]], bool]) -> dict[str, Any] | None:
    """``obj`` when it passes ``check`` (for waits that return the object)."""
    return obj if check(obj) else None


def plan_with_reason(cluster: Cluster, name: str, reason: str) -> dict[str, Any] | None:
    return when(cluster.get("ScalingPlan", name), lambda p: cond_is(p, "Ready", "False", reason))


def wait_event(cluster: Cluster, name: str, reason: str) -> None:
    """Wait for an Event of ``reason`` on the object (Events are posted beside the writes
    they describe, so they may land a moment after them)."""
    cluster.wait(partial(has_event, cluster, name, reason), f"a {reason} Event on {name}")


def has_event(cluster: Cluster, name: str, reason: str) -> bool | None:
    return reason in reasons(cluster, name) or None


def reasons(cluster: Cluster, name: str) -> list[str]:
    return [str(e.get("reason", "")) for e in cluster.events_for(name)]


@pytest.fixture
def recorder(kube: Kube, namespace: str) -> Iterator[RequestRecorder]:
    with RequestRecorder(kube.kubeconfig, namespace) as rec:
        yield rec


def assert_invariants(cluster: Cluster, recorder: RequestRecorder, limit: int) -> None:
    """Nothing lost, moved or assigned twice; no host over its limit; nothing Failed."""
    assert recorder.problems() == []
    requests = cluster.requests()
    failed = [n for n, r in requests.items() if phase(r) == "Failed"]
    assert failed == [], failed
    over = {h: n for h, n in count_by_host(requests).items() if n > limit}
    assert over == {}, over


def test_algorithm_switches_at_the_phase_boundary(
    cluster: Cluster, operator_process: OperatorProcess, recorder: RequestRecorder
) -> None:
    del operator_process
    cluster.setup_pool(POOL, "DepthFirst", 5, hosts=["h1", "h2", "h3"], scaling=scaling(3))
    now = datetime.now(UTC)
    switch = next_boundary(now)
    boundary = now + switch
    cluster.create("ScalingPlan", "office", plan_spec("peak", pools=[POOL], switch_in=switch))
    cluster.wait(
        lambda: (pool_plan(cluster) or {}).get("phase") == "Peak" or None,
        "the pool to follow the plan's Peak",
    )
    assert pool_plan(cluster) == {
        "name": "office",
        "schedule": "everyday",
        "phase": "Peak",
        "loadBalancerType": "BreadthFirst",
    }
    # Breadth-first in Peak, although the pool itself says DepthFirst: the second session
    # goes to one of the two emptiest hosts, never to the first one's (depth-first would).
    first = [f"a{i}" for i in range(3)]
    for i, name in enumerate(first):
        cluster.create_request(name, POOL, f"early{i}")
        cluster.wait_assigned([name])
    placed = [host_of(cluster.request(n)) for n in first]
    assert placed[0] != placed[1], placed
    assert datetime.now(UTC) < boundary, "the boundary passed before the Peak placements"

    remaining = (boundary - datetime.now(UTC)).total_seconds()
    cluster.wait(
        lambda: (pool_plan(cluster) or {}).get("phase") == "RampDown" or None,
        "the pool to switch to RampDown at the boundary",
        timeout=remaining + 30,
    )
    lag = (datetime.now(UTC) - boundary).total_seconds()
    print(f"phase switch observed {lag:.2f} s after the boundary")
    assert pool_plan(cluster) == {
        "name": "office",
        "schedule": "everyday",
        "phase": "RampDown",
        "loadBalancerType": "DepthFirst",
    }
    wait_event(cluster, POOL, "ScalingPlanPhase")
    # Depth-first from now on: both new sessions go to the fullest host (ties: the first in
    # query order, h1..h3 were created in that order).
    counts = count_by_host(cluster.requests())
    fullest = max(["h1", "h2", "h3"], key=lambda h: (counts.get(h, 0), -int(h[1:])))
    second = ["b0", "b1"]
    for i, name in enumerate(second):
        cluster.create_request(name, POOL, f"late{i}")
        cluster.wait_assigned([name])
    assert [host_of(cluster.request(n)) for n in second] == [fullest, fullest]
    # 5 sessions over 3 hosts of 5 slots: 33.3 %, shown rounded up.
    plan = cluster.wait(
        lambda: when(
            cluster.get("ScalingPlan", "office"),
            lambda p: (status(p).get("pools") or [{}])[0].get("usedCapacityPercent") == 34,
        ),
        "the plan's status to show 34 % used",
    )
    assert status(plan)["phase"] == "RampDown"
    entry = status(plan)["pools"][0]
    assert (entry["name"], entry["phase"], entry["loadBalancerType"]) == (
        POOL,
        "RampDown",
        "DepthFirst",
    )
    assert_invariants(cluster, recorder, 5)


def test_minimum_is_created_and_the_threshold_adds_hosts(
    cluster: Cluster, operator_process: OperatorProcess, recorder: RequestRecorder
) -> None:
    del operator_process
    cluster.setup_pool(POOL, "DepthFirst", 2, scaling=scaling(6))
    cluster.create(
        "ScalingPlan",
        "office",
        plan_spec(
            "rampUp",
            pools=[POOL],
            rampUp={"minimumHostsPercent": 50, "capacityThresholdPercent": 60},
        ),
    )
    # ceil(6 x 50 / 100) = 3 hosts, from the pool's template.
    cluster.wait(lambda: len(managed(cluster)) == 3 or None, "the plan's minimum of 3 hosts")
    time.sleep(2)
    assert len(managed(cluster)) == 3, "no more than the minimum"
    plan = cluster.wait(
        lambda: when(
            cluster.get("ScalingPlan", "office"),
            lambda p: bool(
                cond_is(p, "Ready", "True", "Applied")
                and (status(p).get("pools") or [{}])[0].get("minimumHosts") == 3
            ),
        ),
        "the plan Ready with minimumHosts 3",
    )
    assert status(plan)["pools"][0]["capacityThresholdPercent"] == 60
    # 5 sessions on 3 hosts of 2 slots is 84 % > 60 %: ceil(100 x 5 / (60 x 2)) = 5 hosts.
    names = [f"r{i}" for i in range(5)]
    for i, name in enumerate(names):
        cluster.create_request(name, POOL, f"user{i}")
    cluster.wait_assigned(names, timeout=60)
    cluster.wait(lambda: len(managed(cluster)) == 5 or None, "5 hosts for 5 sessions at 60 %")
    time.sleep(2)
    assert len(managed(cluster)) == 5
    assert_invariants(cluster, recorder, 2)


def test_ramp_down_drains_and_removes_the_emptiest_hosts(
    cluster: Cluster, operator_process: OperatorProcess, recorder: RequestRecorder
) -> None:
    del operator_process
    order = peak_at_full_minimum(cluster, "DepthFirst", 4, 4)
    names = ["r0", "r1"]
    for i, name in enumerate(names):
        cluster.create_request(name, POOL, f"user{i}")
    cluster.wait_assigned(names)
    busy = {host_of(cluster.request(n)) or "" for n in names}
    assert len(busy) == 2  # breadth-first in Peak: one each

    # Ramp-down now: minimum ceil(4 x 25 %) = 1, threshold 90 %. With 2 sessions of 4
    # slots, one host is enough: the two empty hosts are drained and removed, then the
    # later of the two busy ones is drained (its user may stay; no forced logoff).
    cluster.patch(
        "ScalingPlan",
        "office",
        {
            "spec": plan_spec(
                "rampDown",
                pools=[POOL],
                rampDown={"minimumHostsPercent": 25, "capacityThresholdPercent": 90},
            )
        },
    )
    cluster.wait(
        lambda: set(managed(cluster)) == busy or None,
        "the empty hosts drained and removed",
        timeout=60,
    )
    last_busy = [h for h in order if h in busy][-1]
    drained = cluster.wait(
        lambda: when(cluster.host(last_busy), lambda h: bool(h["spec"].get("drainMode"))),
        "the later busy host drained",
    )
    assert DRAINED in drained["metadata"]["annotations"]
    kept = next(h for h in busy if h != last_busy)
    assert cluster.host(kept)["spec"].get("drainMode") is not True
    time.sleep(2)
    assert set(managed(cluster)) == busy, "a drained host with a session stays"
    assert all("logoff" not in status(r) for r in cluster.requests().values())
    # Someone undrains it by hand: the plan still wants it drained, and drains it again
    # with its mark (so it is still removed once empty).
    cluster.patch("SessionHost", last_busy, {"spec": {"drainMode": False}})
    time.sleep(2)
    again = cluster.wait(
        lambda: when(
            cluster.host(last_busy),
            lambda h: (
                bool(h["spec"].get("drainMode"))
                and DRAINED in (h["metadata"].get("annotations") or {})
            ),
        ),
        "the host drained again, with the plan's mark",
    )
    assert again["metadata"]["annotations"][DRAINED] != drained["metadata"]["annotations"][DRAINED]
    leaving = next(n for n, r in cluster.requests().items() if host_of(r) == last_busy)
    cluster.delete("SessionRequest", leaving)
    cluster.wait(lambda: last_busy not in cluster.hosts() or None, "the emptied host removed")
    wait_event(cluster, POOL, "HostsDrained")
    wait_event(cluster, POOL, "HostsRemoved")
    pool = cluster.wait_pool(
        POOL,
        lambda p: (status(p).get("scalingPlan") or {}).get("phase") == "RampDown",
        "the pool in RampDown",
    )
    assert status(pool)["scalingPlan"]["loadBalancerType"] == "DepthFirst"
    assert_invariants(cluster, recorder, 4)


def test_plan_writes_refused_for_good_back_off_and_say_so_on_the_plan(
    kube: Kube, cluster: Cluster, operator_process: OperatorProcess
) -> None:
    """An admission policy refuses every drain in the namespace (as a cluster's own policy
    may): the plan's drains fail round after round. Before, they were sent again every 2 s
    forever, with HostsDrained Events for drains that never happened and nothing on the plan.
    Now each round waits longer, no HostsDrained is posted, the plan's Ready turns False with
    WritesFailed, and once the policy goes the drains go through and Ready is True again."""
    peak_at_full_minimum(cluster, "DepthFirst", 4, 2)
    names = ["r0", "r1"]
    for i, name in enumerate(names):
        cluster.create_request(name, POOL, f"user{i}")
    cluster.wait_assigned(names)  # breadth-first in Peak: one on each host
    with host_updates_refused(
        kube,
        cluster.namespace,
        f"no-drains-{cluster.namespace}",
        NO_DRAINS,
        "drains are frozen in this namespace",
    ):
        refused = cluster.wait(lambda: drain_refused(kube, cluster), "the policy in force")
        assert refused
        offset = len(operator_process.log_text())
        # Ramp-down: one host is enough for two sessions (threshold 90 %), so the later busy
        # host is to be drained (its user may stay): a drain, refused.
        ramp_down = plan_spec(
            "rampDown",
            pools=[POOL],
            rampDown={"minimumHostsPercent": 25, "capacityThresholdPercent": 90},
        )
        cluster.patch("ScalingPlan", "office", {"spec": ramp_down})
        ready = cluster.wait(
            lambda: plan_with_reason(cluster, "office", "WritesFailed"), "WritesFailed", 60
        )
        assert POOL in plan_ready(ready)["message"]  # type: ignore[index]
        time.sleep(12)
        rounds = operator_process.log_text()[offset:].count("round(s) of writes in a row failed")
        # First waits of 2, 4 and 8 s (each drawn between half its step and the step): at most
        # five rounds in the ~14 s since the first, where a fixed 2 s gave seven or more.
        assert 2 <= rounds <= 5, f"{rounds} failed rounds"
        assert "HostsDrained" not in reasons(cluster, POOL)
        assert all(not h["spec"].get("drainMode") for h in managed(cluster).values())
    cluster.wait(
        lambda: when(cluster.get("ScalingPlan", "office"), lambda p: cond_is(p, "Ready", "True")),
        "Ready again once the drains went through",
        timeout=400,  # the longest wait so far may have grown to a minute or two
    )
    wait_event(cluster, POOL, "HostsDrained")


#: The admission policy's rule: no update changes whether a host is in drain mode.
NO_DRAINS = (
    "(has(object.spec.drainMode) && object.spec.drainMode) == "
    "(has(oldObject.spec.drainMode) && oldObject.spec.drainMode)"
)


def drain_refused(kube: Kube, cluster: Cluster) -> bool | None:
    """A drain of one of the pool's hosts is refused (the policy is in force): tried as a
    dry run, so nothing is drained if it is not yet."""
    host = next(iter(managed(cluster)))
    path = f"/apis/hostpool.io/v1alpha1/namespaces/{cluster.namespace}/sessionhosts/{host}"
    code, _ = kube.request(
        "PATCH",
        path,
        body={"spec": {"drainMode": True}},
        query={"dryRun": "All"},
        content_type="application/merge-patch+json",
    )
    return code in (400, 403, 422) or None


def test_forced_logoff_sets_the_deadline_and_the_host_goes_when_empty(
    cluster: Cluster, operator_process: OperatorProcess, recorder: RequestRecorder
) -> None:
    del operator_process
    first, second = peak_at_full_minimum(cluster, "DepthFirst", 4, 2)
    for i, name in enumerate(["r0", "r1"]):
        cluster.create_request(name, POOL, f"user{i}")
    cluster.wait_assigned(["r0", "r1"])
    on = {n: host_of(cluster.request(n)) for n in ["r0", "r1"]}
    assert sorted(v or "" for v in on.values()) == sorted([first, second])  # breadth-first
    leaving = next(n for n, h in on.items() if h == second)
    staying = next(n for n, h in on.items() if h == first)

    # Ramp-down: 2 sessions fit one host at 90 %; the last of the equally empty hosts is
    # drained and its user asked to log off within 30 minutes.
    message = "Please save your work: this desktop closes in 30 minutes."
    cluster.patch(
        "ScalingPlan",
        "office",
        {
            "spec": plan_spec(
                "rampDown",
                pools=[POOL],
                rampDown={
                    "capacityThresholdPercent": 90,
                    "forceLogoffUsers": True,
                    "waitTimeMinutes": 30,
                    "notificationMessage": message,
                },
            )
        },
    )
    request = cluster.wait(
        lambda: when(cluster.request(leaving), lambda r: bool(status(r).get("logoff"))),
        "status.logoff on the drained host's request",
    )
    host = cluster.host(second)
    assert host["spec"]["drainMode"] is True
    drained_at = parse_time(host["metadata"]["annotations"][DRAINED])
    logoff = status(request)["logoff"]
    assert logoff["message"] == message
    assert parse_time(logoff["deadline"]) == drained_at + timedelta(minutes=30)
    assert "logoff" not in status(cluster.request(staying))
    assert cluster.host(first)["spec"].get("drainMode") is not True
    time.sleep(2)
    assert second in cluster.hosts(), "a host with a session stays until its user leaves"

    # The agent logs the user off (deletes the request): the empty drained host goes.
    cluster.delete("SessionRequest", leaving)
    cluster.wait(lambda: second not in cluster.hosts() or None, "the emptied host removed")
    assert first in cluster.hosts()
    assert phase(cluster.request(staying)) == "Assigned"
    wait_event(cluster, POOL, "LogoffRequested")
    assert_invariants(cluster, recorder, 4)


def test_zero_active_sessions_ends_disconnected_sessions(
    cluster: Cluster, operator_process: OperatorProcess, recorder: RequestRecorder
) -> None:
    del operator_process
    first, second = peak_at_full_minimum(cluster, "DepthFirst", 4, 2)
    for i, name in enumerate(["r0", "r1"]):
        cluster.create_request(name, POOL, f"user{i}")
    cluster.wait_assigned(["r0", "r1"])
    leaving = next(n for n in ["r0", "r1"] if host_of(cluster.request(n)) == second)
    # The user of the second host disconnects (as its agent would report).
    cluster.patch_status("SessionRequest", leaving, {"sessionState": "Disconnected"})
    cluster.patch(
        "ScalingPlan",
        "office",
        {
            "spec": plan_spec(
                "rampDown",
                pools=[POOL],
                rampDown={"capacityThresholdPercent": 90, "stopHostsWhen": "ZeroActiveSessions"},
            )
        },
    )
    cluster.wait(
        lambda: leaving not in cluster.requests() or None, "the Disconnected request ended"
    )
    cluster.wait(lambda: second not in cluster.hosts() or None, "the drained host removed")
    wait_event(cluster, second, "DisconnectedSessionsEnded")
    assert first in cluster.hosts()
    assert_invariants(cluster, recorder, 4)


def test_conflicts_and_deleting_the_plan_returns_the_pool_to_its_own_settings(
    cluster: Cluster, operator_process: OperatorProcess, recorder: RequestRecorder
) -> None:
    del operator_process
    cluster.setup_pool(POOL, "DepthFirst", 5, hosts=["h1", "h2"], scaling=scaling(2))
    cluster.create("ScalingPlan", "first", plan_spec("peak", pools=[POOL]))
    cluster.wait(
        lambda: (pool_plan(cluster) or {}).get("name") == "first" or None,
        "the pool to follow the first plan",
    )
    time.sleep(1.1)  # a later creationTimestamp (whole seconds)
    cluster.create("ScalingPlan", "second", plan_spec("rampDown", pools=[POOL]))
    second = cluster.wait(
        lambda: when(
            cluster.get("ScalingPlan", "second"),
            lambda p: bool(cond_is(p, "Ready", "False", "PoolConflict")),
        ),
        "PoolConflict on the second plan",
    )
    ready = plan_ready(second)
    assert ready is not None
    assert "'first'" in ready["message"], ready
    wait_event(cluster, "second", "PoolConflict")
    assert cond_is(cluster.get("ScalingPlan", "first"), "Ready", "True", "Applied")
    assert (pool_plan(cluster) or {}).get("name") == "first"
    cluster.create_request("a0", POOL, "u0")
    cluster.create_request("a1", POOL, "u1")
    cluster.wait_assigned(["a0", "a1"])
    # Peak of the first plan: breadth-first.
    assert sorted(host_of(cluster.request(n)) or "" for n in ["a0", "a1"]) == ["h1", "h2"]

    cluster.delete("ScalingPlan", "first")
    cluster.wait(
        lambda: (pool_plan(cluster) or {}).get("name") == "second" or None,
        "the pool to follow the second plan once the first is gone",
    )
    cluster.wait(
        lambda: cond_is(cluster.get("ScalingPlan", "second"), "Ready", "True") or None,
        "the second plan Ready",
    )
    cluster.delete("ScalingPlan", "second")
    cluster.wait_pool(
        POOL,
        lambda p: status(p).get("scalingPlan") is None,
        "status.scalingPlan cleared",
    )
    wait_event(cluster, POOL, "ScalingPlanReleased")
    # The pool's own DepthFirst again: the fullest host with room first (query order).
    cluster.create_request("b0", POOL, "v0")
    cluster.wait_assigned(["b0"])
    assert host_of(cluster.request("b0")) == "h1"
    assert_invariants(cluster, recorder, 5)


def test_bad_plans_are_reported_and_the_operator_carries_on(
    cluster: Cluster, operator_process: OperatorProcess, recorder: RequestRecorder
) -> None:
    del operator_process
    cluster.setup_pool(POOL, "BreadthFirst", 3, hosts=["h1"])  # no scaling
    cluster.create("ScalingPlan", "ghost", plan_spec("peak", pools=["nowhere"]))
    mars = plan_spec("peak", pools=["other"])
    mars["timeZone"] = "Mars/Olympus_Mons"
    cluster.create("ScalingPlan", "mars", mars)
    cluster.create("ScalingPlan", "unscaled", plan_spec("peak", pools=[POOL]))

    expected = {
        "ghost": "PoolNotFound",
        "mars": "UnknownTimeZone",
        "unscaled": "ScalingRequired",
    }
    for name, reason in expected.items():
        plan = cluster.wait(
            partial(plan_with_reason, cluster, name, reason), f"{name}: Ready False {reason}"
        )
        ready = plan_ready(plan)
        assert ready is not None
        assert ready["message"], ready
        wait_event(cluster, name, reason)
    assert "Mars/Olympus_Mons" in (plan_ready(cluster.get("ScalingPlan", "mars")) or {})["message"]
    assert status(cluster.get("ScalingPlan", "mars")).get("phase") is None
    # The pool without scaling keeps its own settings and still places.
    cluster.create_request("r0", POOL, "u0")
    cluster.wait_assigned(["r0"])
    assert (pool_plan(cluster) or {}).get("phase") is None
    # A missing pool that appears is managed from then on.
    cluster.setup_pool("nowhere", "DepthFirst", 2, scaling=scaling(2))
    cluster.wait(
        lambda: cond_is(cluster.get("ScalingPlan", "ghost"), "Ready", "True", "Applied") or None,
        "the plan applied once its pool exists",
    )
    assert_invariants(cluster, recorder, 3)


def test_pod_backed_hosts_follow_the_plan_and_their_pods_go_with_them(
    kube: Kube,
    cluster: Cluster,
    operator_process: OperatorProcess,
    recorder: RequestRecorder,
) -> None:
    del operator_process
    template = workloads.scaling(workloads.pod_template(), maxHosts=3, scaleDownDelaySeconds=3600)
    cluster.create_pool(POOL, "DepthFirst", 2, scaling=template)
    cluster.create(
        "ScalingPlan",
        "office",
        plan_spec("peak", pools=[POOL], rampUp={"minimumHostsPercent": 100}),
    )
    cluster.wait(lambda: len(managed(cluster)) == 3 or None, "3 hosts (100 % of maxHosts)")
    hosts = set(managed(cluster))
    cluster.wait(
        lambda: hosts <= set(workloads.pods(kube, cluster.namespace)) or None,
        "a pod for each host",
    )
    cluster.wait(
        lambda: all(cond_is(h, "Available", "True") for h in managed(cluster).values()) or None,
        "every host open once its pod is Ready",
        timeout=120,  # kwok's pods on a machine busy with the rest of the suite
    )
    # Off-peak with no minimum and no session: every host is drained and removed, and the
    # pods go with their hosts (garbage-collected through their owner reference).
    cluster.patch("ScalingPlan", "office", {"spec": plan_spec("offPeak", pools=[POOL])})
    cluster.wait(lambda: not managed(cluster) or None, "every empty host removed", timeout=60)
    cluster.wait(
        lambda: not (hosts & set(workloads.pods(kube, cluster.namespace))) or None,
        "their pods deleted",
        timeout=60,
    )
    # A logon off-peak still gets a host: the pool's demand-driven scaling stays on.
    cluster.create_request("late", POOL, "night-owl")
    placed = cluster.wait_assigned(["late"], timeout=60)
    host = host_of(placed["late"])
    assert host in managed(cluster)
    assert host in workloads.pods(kube, cluster.namespace)
    assert_invariants(cluster, recorder, 2)


def test_a_restart_keeps_the_plans_drains_and_deadlines(
    cluster: Cluster, operator_process: OperatorProcess, recorder: RequestRecorder
) -> None:
    """What a plan decided lives in the API (the drain mark, status.logoff), so an operator
    restarted in ramp-down neither drains again, nor moves a deadline, nor announces the
    phase twice."""
    first, second = peak_at_full_minimum(cluster, "BreadthFirst", 4, 2)
    for i, name in enumerate(["r0", "r1"]):
        cluster.create_request(name, POOL, f"user{i}")
    cluster.wait_assigned(["r0", "r1"])
    leaving = next(n for n in ["r0", "r1"] if host_of(cluster.request(n)) == second)
    cluster.patch(
        "ScalingPlan",
        "office",
        {
            "spec": plan_spec(
                "rampDown",
                pools=[POOL],
                rampDown={
                    "capacityThresholdPercent": 90,
                    "forceLogoffUsers": True,
                    "waitTimeMinutes": 15,
                },
            )
        },
    )
    before = cluster.wait(
        lambda: when(cluster.request(leaving), lambda r: bool(status(r).get("logoff"))),
        "status.logoff on the drained host's request",
    )
    mark = cluster.host(second)["metadata"]["annotations"][DRAINED]
    cluster.wait_pool(
        POOL,
        lambda p: (status(p).get("scalingPlan") or {}).get("phase") == "RampDown",
        "the pool's status in RampDown",
    )
    # Peak, then RampDown: both announced before the restart.
    cluster.wait(
        lambda: reasons(cluster, POOL).count("ScalingPlanPhase") >= 2 or None,
        "two ScalingPlanPhase Events",
    )
    time.sleep(1)
    phase_events = reasons(cluster, POOL).count("ScalingPlanPhase")

    operator_process.restart()
    cluster.create_request("r2", POOL, "user2")
    cluster.wait_assigned(["r2"])
    assert host_of(cluster.request("r2")) == first, "the drained host takes no new session"
    time.sleep(3)
    after = cluster.request(leaving)
    assert status(after)["logoff"] == status(before)["logoff"]
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert cluster.host(second)["metadata"]["annotations"][DRAINED] == mark
    assert cluster.host(first)["spec"].get("drainMode") is not True
    assert reasons(cluster, POOL).count("ScalingPlanPhase") == phase_events
    assert_invariants(cluster, recorder, 4)
