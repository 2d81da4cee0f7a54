"""The simulator: run a pool, its hosts and a stream of requests through the engine.

``run_scenario(document) -> result`` and ``hostpool-operator simulate FILE`` take the same
document (see the API contract): hosts in query order, requests placed one after another,
each seeing the state the previous one left. ``run_timeline`` (a day or a week of logons
with scaling and plans) lives in :mod:`.timeline`; both are importable from the package.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError, model_validator

from ..api import (
    MAX_COUNT,
    MAX_NAME,
    MAX_USER,
    ApiModel,
    HostMetrics,
    HostPoolSpec,
    Protocol,
    Reason,
    SessionHostTemplateSpec,
    describe_validation_error,
)
from ..engine.balancer_view import BalancerHost
from ..engine.balancing import PoolBalancer
from ..engine.demand import Demand
from ..scaling.rules import ScaleHost, hosts_to_add

MAX_SCENARIO_HOSTS = 100_000
MAX_SCENARIO_REQUESTS = 1_000_000


class ScenarioError(ValueError):
    """An invalid scenario; the message names the offending field."""


class ScenarioHost(ApiModel):
    """One host of a scenario, with the sessions it already has."""

    name: str = Field(min_length=1, max_length=MAX_NAME)
    spec: SessionHostTemplateSpec = Field(default_factory=SessionHostTemplateSpec)
    users: list[str] = Field(default_factory=list, max_length=MAX_COUNT)
    sessions: int | None = Field(default=None, ge=0, le=MAX_COUNT)
    connecting: int = Field(default=0, ge=0, le=MAX_COUNT)
    metrics: HostMetrics | None = None

    @model_validator(mode="after")
    def _counts_agree(self) -> ScenarioHost:
        if any(not user or len(user) > MAX_USER for user in self.users):
            raise ValueError(f"users must be 1..{MAX_USER} characters long")
        if len(set(self.users)) != len(self.users):
            raise ValueError("users must not repeat (one session per user per pool)")
        if self.sessions is not None and self.sessions < len(self.users):
            raise ValueError(
                f"sessions ({self.sessions}) must be >= the number of users ({len(self.users)})"
            )
        if self.connecting > self.session_count:
            raise ValueError(
                f"connecting ({self.connecting}) must be <= sessions ({self.session_count})"
            )
        return self

    @property
    def session_count(self) -> int:
        return len(self.users) if self.sessions is None else self.sessions


class ScenarioRequest(ApiModel):
    """A SessionRequest spec without its poolRef."""

    user: str = Field(min_length=1, max_length=MAX_USER)
    protocol: Protocol | None = None
    unauthenticated: bool = False


class Scenario(ApiModel):
    seed: int | None = None
    pool: HostPoolSpec
    hosts: list[ScenarioHost] = Field(default_factory=list, max_length=MAX_SCENARIO_HOSTS)
    requests: list[ScenarioRequest] = Field(default_factory=list, max_length=MAX_SCENARIO_REQUESTS)

    @model_validator(mode="after")
    def _unique(self) -> Scenario:
        names: set[str] = set()
        users: dict[str, str] = {}
        for host in self.hosts:
            if host.name in names:
                raise ValueError(f"host name {host.name!r} appears twice")
            names.add(host.name)
            for user in host.users:
                if user in users:
                    raise ValueError(
                        f"user {user!r} has sessions on {users[user]!r} and {host.name!r}; "
                        "a user has at most one session per pool"
                    )
                users[user] = host.name
        return self


def parse_scenario(document: Any) -> Scenario:
    """Validate a scenario document; raises ScenarioError naming the field."""
    if not isinstance(document, dict):
        raise ScenarioError("scenario: must be a mapping with pool, hosts and requests")
    try:
        return Scenario.model_validate(document)
    except ValidationError as error:
        raise ScenarioError(describe_validation_error(error, whole="scenario")) from None


def balancer_for(scenario: Scenario) -> PoolBalancer:
    hosts = [
        BalancerHost(
            name=h.name,
            drain_mode=h.spec.drain_mode,
            features=h.spec.features,
            address=h.spec.address,
            sessions=h.session_count,
            connecting=h.connecting,
            metrics=h.metrics,
            order=i,
            logon_storm=h.spec.logon_storm,
        )
        for i, h in enumerate(scenario.hosts)
    ]
    sessions = [(user, h.name) for h in scenario.hosts for user in h.users]
    return PoolBalancer(scenario.pool, hosts, sessions, seed=scenario.seed)


def run_scenario(document: dict[str, Any]) -> dict[str, Any]:
    """Place every request of the scenario in turn; return assignments, hosts and scaleUp."""
    scenario = parse_scenario(document)
    balancer = balancer_for(scenario)
    assignments = []
    waiting_users: set[str] = set()
    for request in scenario.requests:
        demand = Demand(request.user, request.protocol, request.unauthenticated)
        placement = balancer.assign(demand)
        assignments.append(
            {"user": request.user, "host": placement.host, "reason": placement.reason.value}
        )
        if placement.reason is Reason.POOL_SATURATED:
            waiting_users.add(request.user)
    scale_hosts = [
        ScaleHost(name=h.name, sessions=h.sessions, drain_mode=h.drain_mode)
        for h in balancer.hosts()
    ]
    scale_up = hosts_to_add(
        scenario.pool.scaling, balancer.limit, scale_hosts, len(waiting_users)
    ).add
    return {"assignments": assignments, "hosts": balancer.snapshot(), "scaleUp": scale_up}


def format_table(result: dict[str, Any]) -> str:
    """A plain-text report: the assignments, then each host's final state."""
    lines = []
    width = max([4, *(len(a["user"]) for a in result["assignments"])])
    lines.append(f"{'USER':<{width}}  {'HOST':<16}  REASON")
    for a in result["assignments"]:
        lines.append(f"{a['user']:<{width}}  {a['host'] or '-':<16}  {a['reason']}")
    lines.append("")
    name_width = max([4, *(len(h["name"]) for h in result["hosts"])])
    lines.append(f"{'HOST':<{name_width}}  SESSIONS  CONNECTING  LOAD  BUCKET")
    for h in result["hosts"]:
        bucket = "-" if h["bucket"] is None else str(h["bucket"])
        lines.append(
            f"{h['name']:<{name_width}}  {h['sessions']:>8}  {h['connecting']:>10}  "
            f"{h['loadIndex']:>4}  {bucket:>6}"
        )
    placed = sum(1 for a in result["assignments"] if a["host"] is not None)
    lines.append("")
    lines.append(
        f"placed {placed} of {len(result['assignments'])} requests; "
        f"scaling would add {result['scaleUp']} host(s)"
    )
    return "\n".join(lines)


def plot(result: dict[str, Any], out: Path, *, title: str, limit: int | None) -> None:
    """Sessions per host as bars (connecting ones stacked on top), the limit as a line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    hosts = result["hosts"]
    names = [h["name"] for h in hosts]
    settled = [h["sessions"] - h["connecting"] for h in hosts]
    connecting = [h["connecting"] for h in hosts]
    fig, ax = plt.subplots(figsize=(max(6.0, 0.45 * len(hosts) + 2), 4))
    ax.bar(names, settled, label="sessions", color="#4477aa")
    ax.bar(names, connecting, bottom=settled, label="connecting", color="#ee8866")
    if limit is not None and hosts and limit <= 2 * max(h["sessions"] for h in hosts) + 1:
        ax.axhline(limit, color="#aa3377", linestyle="--", label=f"maxSessionLimit {limit}")
    tallest = max([limit or 0, *(h["sessions"] for h in hosts), 1])
    if limit is not None and limit > 2 * max([1, *(h["sessions"] for h in hosts)]) + 1:
        tallest = max([1, *(h["sessions"] for h in hosts)])
    ax.set_ylim(0, tallest * 1.35)
    ax.set_ylabel("sessions")
    ax.set_title(title)
    ax.legend(loc="upper right")
    ax.tick_params(axis="x", labelrotation=90 if len(hosts) > 12 else 0)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
