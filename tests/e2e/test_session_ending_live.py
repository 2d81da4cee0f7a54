"""Nobody is locked out by a session that is ending: the broker process, the operator process
and the suite's API server, with Keycloak's tokens.

* A request the operator marks Failed (its host deleted) while it carries a logoff: the user's
  next connect gets a new request and ``DELETE .../session`` works, instead of 202
  ``SessionEnding`` and 404 for good.
* Ending a session on a host whose agent went silent (figures older than the broker's
  ``--metrics-stale-after``) deletes the request instead of asking an agent that never acts.
* A logoff past its deadline plus the operator's ``--logoff-grace`` with no agent acting is
  finished by the operator: the request deleted, a ``LogoffOverdue`` Event.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from hostpool_operator.api.timestamps import rfc3339
from support.agent_process import AgentProcess
from support.broker_helpers import (
    POOL,
    BrokerProcess,
    Connecting,
    Reply,
    assert_refused,
    entitled_pool,
)
from support.cluster import Cluster
from support.conditions import phase
from support.kube import Kube
from support.operator_process import OperatorProcess
from support.ports import free_port

Obj = dict[str, Any]

#: The grace the operator of the overdue-logoff test gives agents (the default is 300 s).
GRACE = 2.0


def set_logoff(cluster: Cluster, name: str, deadline: datetime, message: str = "bye") -> None:
    """What a scaling plan's ramp-down (or the broker's end-session) writes on a request."""
    cluster.patch_status(
        "SessionRequest", name, {"logoff": {"message": message, "deadline": rfc3339(deadline)}}
    )


def until(call: Callable[[], Reply], done: Callable[[Reply], bool], timeout: float = 10) -> Reply:
    """``call`` again (as a client told Retry-After would, faster) until ``done`` or the
    time is up; the last reply. Only the broker's cache catching up is waited for."""
    deadline = time.monotonic() + timeout
    while True:
        reply = call()
        if done(reply) or time.monotonic() > deadline:
            return reply
        time.sleep(0.5)


def connected(broker: BrokerProcess, cluster: Cluster, token: str) -> Obj:
    reply = broker.connect(cluster.namespace, POOL, token)
    assert reply.status == 200, reply.text
    return reply.body  # type: ignore[no-any-return]


def test_a_failed_request_with_a_logoff_is_replaced_and_can_be_ended(
    connecting: Connecting,
) -> None:
    cluster, brokers, tokens = connecting
    entitled_pool(cluster, ["h1", "h2"], limit=2, users=["alice", "carol"])
    broker = brokers()
    alice, carol = tokens("alice"), tokens("carol")
    first = connected(broker, cluster, alice)
    other = connected(broker, cluster, carol)
    host = first["host"]
    assert other["host"] == host  # depth-first: both on the fuller host
    old_uid = cluster.request(first["request"])["metadata"]["uid"]
    # A ramp-down asked both to log off within the hour; then the host is deleted.
    for name in (first["request"], other["request"]):
        set_logoff(cluster, name, datetime.now(UTC) + timedelta(hours=1))
    cluster.delete("SessionHost", host)

    def failed_both() -> bool | None:
        requests = cluster.requests()
        names = (first["request"], other["request"])
        return all(phase(requests[n]) == "Failed" for n in names if n in requests) or None

    cluster.wait(failed_both, "the operator fails both requests", 30)
    # The operator's Failed status leaves no logoff behind: nobody would carry it out.
    assert "logoff" not in (cluster.request(first["request"]).get("status") or {})

    # The next connect gets a new request on the host that is left (once the broker's cache
    # has the Failed version: before the fix it answered 202 SessionEnding for good).
    answers = []

    def connect_again() -> Any:
        answers.append(broker.connect(cluster.namespace, POOL, alice))
        return answers[-1]

    again = until(connect_again, lambda r: r.status != 202)
    assert again.status == 200, f"{again.status}: {again.text}"
    assert again.body["request"] == first["request"]  # the user's name for it...
    placed = cluster.request(again.body["request"])
    assert placed["metadata"]["uid"] != old_uid  # ...anew
    assert again.body["host"] != host
    # The operator placed it as a new session. The broker says so when it answers the
    # connect that created it; one that timed out first (202, a loaded machine) is followed
    # by a connect that finds the request placed: a reconnect, as for any caller who asks again.
    assert placed["status"]["reason"] == "NewSession"
    created_here = all(a.status != 202 or a.body.get("reason") == "SessionEnding" for a in answers)
    assert again.body["reason"] == ("NewSession" if created_here else "Reconnected"), [
        (a.status, a.body.get("reason")) for a in answers
    ]

    # Ending a session works, for the new request and for the failed one alike.
    ended = broker.end_session(cluster.namespace, POOL, alice)
    assert ended.status == 202, ended.text
    assert ended.body["requests"] == [first["request"]]
    cluster.wait(lambda: first["request"] not in cluster.requests() or None, "alice's deleted")
    gone = broker.end_session(cluster.namespace, POOL, carol)
    assert gone.status == 202, gone.text
    assert gone.body["requests"] == [other["request"]]
    cluster.wait(lambda: other["request"] not in cluster.requests() or None, "carol's deleted")
    nothing = until(
        lambda: broker.end_session(cluster.namespace, POOL, carol), lambda r: r.status == 404
    )
    assert_refused(nothing, 404, "NoSession")


def test_ending_a_session_on_a_host_whose_agent_went_silent_deletes_the_request(
    connecting: Connecting, logoff_agent: Callable[[str], tuple[AgentProcess, Path]]
) -> None:
    cluster, brokers, tokens = connecting
    entitled_pool(cluster, ["h1"], users=["alice"])
    agent, logoffs = logoff_agent("h1")
    broker = brokers("--metrics-stale-after", "3")
    token = tokens("alice")
    try:
        cluster.wait(
            lambda: ((cluster.host("h1").get("status") or {}).get("metrics") or {}).get(
                "sampledAt"
            ),
            "the agent's figures",
        )
        name = connected(broker, cluster, token)["request"]
    finally:
        agent.stop()  # the agent goes silent: its last figures stay in the host's status
    assert "agent" in cluster.host("h1")["status"]
    time.sleep(4.5)  # older than the broker's --metrics-stale-after

    started = time.monotonic()
    ended = broker.end_session(cluster.namespace, POOL, token)
    assert ended.status == 202, ended.text
    assert ended.body["requests"] == [name]
    cluster.wait(lambda: name not in cluster.requests() or None, "the request deleted", 10)
    took = time.monotonic() - started
    assert not logoffs.exists()  # no agent was there to do it
    assert took < 5, f"the request went after {took:.1f}s"
    # The user is not locked out: the next connect is a new session.
    assert connected(broker, cluster, token)["reason"] == "NewSession"


@pytest.fixture
def graceful_operator(kube: Kube, namespace: str, tmp_path: Path) -> Iterator[OperatorProcess]:
    """The operator for this namespace with a short --logoff-grace."""
    operator = OperatorProcess(
        kube.kubeconfig,
        namespace,
        tmp_path / "operator.log",
        extra_args=["--logoff-grace", str(GRACE)],
        metrics_port=free_port(),
    )
    operator.start()
    try:
        yield operator
    finally:
        operator.stop()
    problems = operator.problems()
    if problems:
        pytest.fail("the operator logged errors:\n" + "\n".join(problems[:40]), pytrace=False)


def test_a_logoff_nobody_carries_out_is_finished_by_the_operator_after_the_grace(
    cluster: Cluster, graceful_operator: OperatorProcess
) -> None:
    cluster.setup_pool(POOL, "DepthFirst", 2, hosts=["h1"])
    cluster.create_request("kept", POOL, "alice")
    cluster.create_request("overdue", POOL, "bob")
    cluster.wait_assigned(["kept", "overdue"])
    deadline = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=2)
    set_logoff(cluster, "overdue", deadline)
    set_logoff(cluster, "kept", deadline + timedelta(hours=1))  # not due: left alone
    # h1 has no agent: nobody logs bob off. The operator does, GRACE after the deadline.
    cluster.wait(lambda: "overdue" not in cluster.requests() or None, "the request deleted", 30)
    finished = datetime.now(UTC)
    assert finished >= deadline + timedelta(seconds=GRACE)
    assert finished < deadline + timedelta(seconds=GRACE + 10), finished - deadline

    def overdue_event() -> Obj | None:
        events = cluster.events_for("overdue")
        return next((e for e in events if e.get("reason") == "LogoffOverdue"), None)

    event = cluster.wait(overdue_event, "the LogoffOverdue Event")
    assert event["type"] == "Warning"
    assert event["involvedObject"]["kind"] == "SessionRequest"
    assert rfc3339(deadline) in event["message"]
    assert "h1" in event["message"]
    assert "kept" in cluster.requests()
    # The slot is free again: bob's next request is placed.
    cluster.create_request("overdue", POOL, "bob")
    cluster.wait_assigned(["overdue"])
