"""The checks every fault test ends with (:func:`invariant_problems`): every request placed
exactly once, none moved, no host over its limit, the hosts' own counts agreeing with the
requests on them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from support.conditions import Obj, host_of, per_host_users, status
from support.kube import OUTAGE, Kube, wait_for
from support.recorder import RequestHistory


def invariant_problems(
    requests: Mapping[str, Obj],
    hosts: Mapping[str, Obj],
    histories: Mapping[str, RequestHistory],
    limits: Mapping[str, int],
    names: Iterable[str],
    *,
    reset: Iterable[str] = (),
    failed_ok: Iterable[str] = (),
) -> list[str]:
    """Everything wrong with the end state of a storm, as readable lines:

    * every named request exists and is Assigned, to a host of its own pool;
    * no host has more distinct users than its pool's ``limits[pool]`` (``limits`` names
      every pool whose hosts are checked);
    * by the recorded history: no request was ever seen Assigned to two hosts or assigned
      twice, and none left Assigned again. Requests in ``reset`` (a foreign writer reset
      their status) may be assigned again, once per reset, to any host; requests in
      ``failed_ok`` (their host was deleted) may go from Assigned to Failed.
    """
    problems: list[str] = []
    allowed = set(reset)
    may_fail = set(failed_ok)
    for name in names:
        obj = requests.get(name)
        if obj is None:
            problems.append(f"{name}: lost (no such request)")
            continue
        pool = str(((obj.get("spec") or {}).get("poolRef") or {}).get("name"))
        st = status(obj)
        if st.get("phase") != "Assigned":
            problems.append(
                f"{name}: phase {st.get('phase')} reason {st.get('reason')}: {st.get('message')}"
            )
            continue
        host = host_of(obj)
        host_obj = hosts.get(host or "")
        if host_obj is None:
            problems.append(f"{name}: assigned to {host!r}, which is no host")
        elif host_obj["spec"]["poolRef"]["name"] != pool:
            problems.append(f"{name}: pool {pool} but host {host} is in another pool")
    for host, users in sorted(per_host_users(requests).items()):
        host_obj = hosts.get(host)
        if host_obj is None:
            continue
        pool = host_obj["spec"]["poolRef"]["name"]
        if pool in limits and len(users) > limits[pool]:
            problems.append(f"host {host}: {len(users)} sessions, over the limit {limits[pool]}")
    for name, history in sorted(histories.items()):
        if name not in allowed:
            problems += history.problems(name, may_fail=name in may_fail, assigned_only=True)
    return problems


def describe_sessions(requests: Mapping[str, Obj], hosts: Mapping[str, Obj]) -> str:
    """A compact view of where sessions are and what waits, for failure messages."""
    counts = {h: len(u) for h, u in per_host_users(requests).items()}
    phases: dict[str, int] = {}
    for obj in requests.values():
        key = f"{status(obj).get('phase')}/{status(obj).get('reason')}"
        phases[key] = phases.get(key, 0) + 1
    host_lines = [
        f"  {h}: api={counts.get(h, 0)} status={(status(o).get('sessions') or {}).get('total')}"
        f" drain={o['spec'].get('drainMode', False)}"
        for h, o in sorted(hosts.items())
    ]
    return f"requests by phase/reason: {phases}\nhosts:\n" + "\n".join(host_lines)


def wait_host_status_matches(kube: Kube, namespace: str, timeout: float = 60.0) -> None:
    """Until every host's status.sessions.total equals the Assigned requests on it: the
    operator's own count agrees with the API (nothing lost from its ledger)."""

    def check() -> bool:
        requests = kube.objects("SessionRequest", namespace)
        hosts = kube.objects("SessionHost", namespace)
        counts = {h: len(u) for h, u in per_host_users(requests).items()}
        return all(
            (status(obj).get("sessions") or {}).get("total") == counts.get(name, 0)
            for name, obj in hosts.items()
        )

    wait_for(
        check,
        timeout,
        what="host status.sessions.total to match the Assigned requests",
        show=lambda: describe_sessions(
            kube.objects("SessionRequest", namespace), kube.objects("SessionHost", namespace)
        ),
        retry_on=OUTAGE,
    )
