"""One step of a pool's image update: which outdated hosts get a replacement, which are
deleted, which are drained for a forced logoff, and where the update stands.

Pure: a function of the hosts as the API shows them, the pool's update settings and ``now``.
Every decision is read back from the cluster (the template-revision label, the
``replaced-by`` annotation an outdated host gets before its replacement is made), so an
operator that restarts, or a standby that takes over, carries on where the last one stopped:
a host is never replaced twice, and none is forgotten.

The rules (a Deployment's rolling update, but for hosts that hold people's sessions):

* **Wanted size** ``W``: the pool's hosts, counting a pair (an outdated host and its
  replacement) once. ``maxSurge`` and ``maxUnavailable`` are resolved against it.
* **Capacity**: hosts taking sessions never fall below ``W - maxUnavailable`` through the
  update, and hosts never exceed ``W + maxSurge`` (the canary's hosts count as surge, at
  least ``canary.hosts`` of them).
* An **empty** outdated host is replaced at once: its replacement is made, and it is deleted
  in the same step when that keeps capacity (else once the replacement serves).
* An outdated host **with sessions** gets a replacement made ahead (surge), which the
  placement fills first; it is deleted when its last session ends. ``WaitForLogoff`` ends no
  session; ``ForceLogoff`` drains it (its users get the pool's notice and are logged off
  ``logoffDelayMinutes`` later).
* **Canary**: the first ``canary.hosts`` replacements are made alone and watched; one not
  Ready within ``readyTimeoutMinutes`` fails the update, and then no outdated host is touched.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from ..api.update import UpdatePhase, UpdateSpec, UpdateStrategy, resolve_count


@dataclass(frozen=True, slots=True)
class RolloutHost:
    """What an update needs to know of one host the operator made."""

    name: str
    #: The template revision it was made from (its label; None: made before revisions were
    #: kept, and adopted as the current revision's).
    revision: str | None
    sessions: int = 0
    #: Takes new sessions now: its workload Ready, not draining.
    serving: bool = True
    created: datetime | None = None
    #: Its workload has not become Ready, and why (the workload's own words: ErrImagePull...);
    #: None when it is Ready (or has no workload).
    not_ready: str | None = None
    #: When its workload became Ready (the canary's watch counts from it).
    ready_since: datetime | None = None
    #: The replacement made for it (the ``replaced-by`` annotation), if any.
    replaced_by: str | None = None
    #: When the update drained it for a forced logoff (None: it did not).
    drained_at: datetime | None = None
    #: Personal pools: stopped (its workload deleted, its volumes kept).
    stopped: bool = False
    #: A failure its agent reported since it became Ready (a logon refused, a session that
    #: did not start), in words; read for the canary's hosts only.
    failure: str | None = None


@dataclass(frozen=True, slots=True)
class Failure:
    """Why the update stopped: the host, and the cause in words."""

    host: str
    cause: str


@dataclass(frozen=True, slots=True)
class Bounds:
    """The wanted size and the update's room around it."""

    wanted: int
    max_surge: int
    max_unavailable: int


@dataclass(frozen=True, slots=True)
class RolloutStep:
    """What an update does now, and what its status says."""

    phase: UpdatePhase | None
    updated: int
    outdated: int
    message: str
    #: Outdated hosts to give a replacement now (annotated first, then the new host made).
    replace: tuple[str, ...] = ()
    #: Outdated hosts to delete now (empty, and their capacity is not needed).
    delete: tuple[str, ...] = ()
    #: Of ``delete``, those replaced at once that must go before their replacement is made:
    #: there is no room for both at the same moment (maxSurge in use).
    delete_first: tuple[str, ...] = ()
    #: ForceLogoff: outdated hosts to drain now (their users' logoff counts from it).
    drain: tuple[str, ...] = ()
    #: A failed canary's hosts: drained, so nobody lands on a host that fails logons.
    close: tuple[str, ...] = ()
    #: Personal pools: idle outdated hosts whose workload is made again (deleted; the
    #: operator makes it anew from the current template, the volumes kept).
    remake: tuple[str, ...] = ()
    #: Personal pools: stopped outdated hosts, labelled with the current revision: their
    #: workload is made from it when they start.
    relabel: tuple[str, ...] = ()
    failure: Failure | None = None
    #: The canary has been watched long enough: the rest follow (kept in status).
    canary_passed: bool = False
    #: When something becomes due without an event (notBefore, a canary's deadline).
    wake_at: datetime | None = None
    #: The wanted size and bounds the step kept (for status and the tests).
    bounds: Bounds | None = None


@dataclass(frozen=True, slots=True)
class UpdateHistory:
    """What the pool's status remembers of the update (status.update)."""

    phase: UpdatePhase | None = None
    revision: str | None = None
    message: str | None = None
    canary_passed: bool = False


def bounds(spec: UpdateSpec, wanted: int) -> Bounds:
    """``maxSurge`` and ``maxUnavailable`` as counts for a pool of ``wanted`` hosts. Two
    percentages that both round to 0 would stall the update: one host may then be
    unavailable (as a Deployment does)."""
    surge = resolve_count(spec.max_surge, wanted, round_up=True)
    unavailable = resolve_count(spec.max_unavailable, wanted, round_up=False)
    if surge == 0 and unavailable == 0:
        unavailable = 1
    return Bounds(wanted, surge, unavailable)


def decide(
    spec: UpdateSpec,
    revision: str,
    hosts: Sequence[RolloutHost],
    history: UpdateHistory,
    now: datetime,
    *,
    personal: bool = False,
) -> RolloutStep:
    """The update's step for the operator's hosts of one pool (those being removed left out).
    A personal pool's hosts are made again in place, never replaced (see
    :func:`personal_step`)."""
    pool = _Hosts.of(hosts, revision)
    limits = bounds(spec, len(hosts) - len(pool.pairs) - len(pool.extra))
    base = RolloutStep(
        UpdatePhase.PROGRESSING,
        len(hosts) - len(pool.outdated),
        len(pool.outdated),
        message="",
        bounds=limits,
    )
    held = _held(spec, base, revision, history, now)
    if held is not None:
        return held
    if personal:
        return personal_step(base, pool.outdated, hosts)
    canary_passed = history.canary_passed and history.revision == revision
    if spec.canary is not None and not canary_passed:
        step = _canary(spec, base, pool, now)
        if step is not None:
            return step
    return _roll(spec, base, pool)


@dataclass(frozen=True, slots=True)
class _Hosts:
    """The pool's hosts as one step reads them."""

    by_name: dict[str, RolloutHost]
    outdated: list[RolloutHost]
    #: Outdated host -> its replacement of the current revision, still there.
    pairs: dict[str, str | None]
    #: Outdated hosts made as another outdated host's replacement by an earlier update (a
    #: failed canary, say): extra hosts, not part of the pool's size. Each goes once empty,
    #: with no replacement.
    extra: frozenset[str]

    @classmethod
    def of(cls, hosts: Sequence[RolloutHost], revision: str) -> _Hosts:
        by_name = {h.name: h for h in hosts}
        outdated = [h for h in hosts if h.revision not in (None, revision)]
        pairs = {h.name: h.replaced_by for h in outdated if _paired(h, by_name, revision)}
        extra = frozenset(
            made.name
            for h in outdated
            if h.replaced_by is not None
            and (made := by_name.get(h.replaced_by)) is not None
            and made.revision not in (None, revision)
        )
        return cls(by_name, outdated, pairs, extra)


def _held(
    spec: UpdateSpec, base: RolloutStep, revision: str, history: UpdateHistory, now: datetime
) -> RolloutStep | None:
    """The step when nothing is to be done now: failed, complete, OnDelete, paused, or
    before notBefore (None: the update acts)."""
    if history.phase is UpdatePhase.FAILED and history.revision == revision:
        return replace(base, phase=UpdatePhase.FAILED, message=history.message or "failed")
    if not base.outdated:
        if history.phase is None:
            return replace(base, phase=None, message="all hosts are on the current revision")
        return replace(
            base, phase=UpdatePhase.COMPLETE, message=f"all {base.updated} host(s) updated"
        )
    if spec.strategy is UpdateStrategy.ON_DELETE:
        message = f"{base.outdated} outdated host(s), each made again when deleted (OnDelete)"
        return replace(base, message=message)
    if spec.paused:
        return replace(base, phase=UpdatePhase.PAUSED, message="paused (spec.update.paused)")
    if spec.not_before is not None and now < spec.not_before:
        message = f"waiting for notBefore {spec.not_before.isoformat()}"
        return replace(base, message=message, wake_at=spec.not_before)
    return None


def personal_step(
    base: RolloutStep, outdated: Sequence[RolloutHost], hosts: Sequence[RolloutHost]
) -> RolloutStep:
    """A personal pool's update: each host holds its user's files, so it is made again in
    place (its volume claims kept), never replaced, and never while a session is on it.

    * A **stopped** outdated host is labelled with the current revision: its workload is
      made from the new template when it starts.
    * An **idle** running one (no session, not even a disconnected one) has its workload
      made again now, ``maxUnavailable`` at a time (hosts starting count against it).
    * One **with a session** waits for its user to log off (or for its next stop).
      ForceLogoff does not apply: a person's own desktop is not taken from them.
    """
    limits = base.bounds
    assert limits is not None
    starting = sum(1 for h in hosts if not h.stopped and h.not_ready is not None)
    room = max(0, limits.max_unavailable - starting)
    relabel = tuple(h.name for h in outdated if h.stopped)
    idle = [h for h in outdated if not h.stopped and h.sessions == 0 and h.serving]
    remake = tuple(h.name for h in idle[:room])
    busy = sum(1 for h in outdated if not h.stopped and h.sessions > 0)
    message = (
        f"{base.updated} personal host(s) updated, {base.outdated} outdated: stopped ones "
        f"start on the new revision, idle ones are made again ({limits.max_unavailable} at "
        f"a time), {busy} wait for their user to log off"
    )
    return replace(base, message=message, remake=remake, relabel=relabel)


def _paired(host: RolloutHost, by_name: dict[str, RolloutHost], revision: str) -> bool:
    """Has this outdated host a replacement of the current revision that still exists? (One
    of a failed revision, or one removed since, no longer counts: it is given another.)"""
    made = by_name.get(host.replaced_by) if host.replaced_by else None
    return made is not None and made.revision in (None, revision)


def _fewest_sessions_first(hosts: Sequence[RolloutHost]) -> list[RolloutHost]:
    # Hosts that take no sessions now cost no capacity; then the emptiest: they end soonest.
    return sorted(hosts, key=lambda h: (h.sessions, h.serving, h.name))


def _canary(spec: UpdateSpec, base: RolloutStep, pool: _Hosts, now: datetime) -> RolloutStep | None:
    """The canary stage: its hosts made (as surge) and watched. None once it has passed."""
    canary = spec.canary
    assert canary is not None
    by_name, pairs = pool.by_name, pool.pairs
    made = [by_name[name] for name in pairs.values() if name in by_name]
    deadlines: list[datetime] = []
    watched = 0
    for host in sorted(made, key=lambda h: h.name):
        started = host.created or now
        ready_by = started + timedelta(minutes=canary.ready_timeout_minutes)
        if host.ready_since is None:
            if now >= ready_by:
                cause = host.not_ready or "not Ready"
                return _canary_failed(
                    base,
                    Failure(
                        host.name,
                        f"canary host {host.name} not Ready {canary.ready_timeout_minutes} "
                        f"min after it was made: {cause}",
                    ),
                    made,
                )
            deadlines.append(ready_by)
            continue
        if host.failure is not None:
            cause = f"canary host {host.name}: {host.failure}"
            return _canary_failed(base, Failure(host.name, cause), made)
        watched_until = host.ready_since + timedelta(minutes=canary.observe_minutes)
        if now >= watched_until:
            watched += 1
        else:
            deadlines.append(watched_until)
    if watched >= canary.hosts:
        return None
    unpaired = [
        h
        for h in _fewest_sessions_first(pool.outdated)
        if h.name not in pairs and h.name not in pool.extra
    ]
    more = tuple(h.name for h in unpaired[: max(0, canary.hosts - len(made))])
    message = (
        f"canary: {watched} of {canary.hosts} host(s) watched for {canary.observe_minutes} min"
    )
    return replace(
        base, message=message, replace=more, wake_at=min(deadlines) if deadlines else None
    )


def _canary_failed(base: RolloutStep, failure: Failure, made: Sequence[RolloutHost]) -> RolloutStep:
    """The update stops; the canary's hosts are closed, the outdated ones untouched."""
    return replace(
        base,
        phase=UpdatePhase.FAILED,
        message=failure.cause,
        failure=failure,
        close=tuple(h.name for h in made),
    )


def _roll(spec: UpdateSpec, base: RolloutStep, pool: _Hosts) -> RolloutStep:
    """Past the canary (or without one): replace, delete and drain within the bounds."""
    limits = base.bounds
    assert limits is not None
    by_name, pairs, outdated = pool.by_name, pool.pairs, pool.outdated
    hosts = by_name.values()
    serving = sum(1 for h in hosts if h.serving)
    # How many serving hosts may go out of service now, and how many hosts may be made.
    spare = serving - (limits.wanted - limits.max_unavailable)
    room = limits.wanted + limits.max_surge - len(by_name)
    made_for: list[str] = []
    delete: list[str] = []
    delete_first: list[str] = []
    drain: list[str] = []
    for host in _fewest_sessions_first(outdated):
        made = by_name.get(pairs[host.name] or "") if host.name in pairs else None
        if host.name in pool.extra:  # an earlier update's extra host: goes once empty
            if host.sessions == 0 and (not host.serving or spare > 0):
                spare -= host.serving
                delete.append(host.name)
            continue
        if host.sessions == 0:
            if made is None:
                if not host.serving or spare > 0:  # replaced at once: made and deleted
                    spare -= host.serving
                    made_for.append(host.name)
                    delete.append(host.name)
                    # Made before it is deleted, both are there for a moment (all of a
                    # step's hosts are made before its deletes): that takes room, else it
                    # goes first.
                    if room > 0:
                        room -= 1
                    else:
                        delete_first.append(host.name)
                elif room > 0:  # made first; deleted once the new one serves
                    room -= 1
                    made_for.append(host.name)
            elif not host.serving or spare > 0:
                # A serving host going costs capacity whatever its replacement does: that one
                # is counted among the serving already.
                spare -= host.serving
                delete.append(host.name)
            continue
        if made is None and room > 0:
            room -= 1
            made_for.append(host.name)
        force = spec.strategy is UpdateStrategy.FORCE_LOGOFF
        if force and host.drained_at is None and host.serving and spare > 0:
            spare -= 1
            drain.append(host.name)
    waiting = sum(1 for h in outdated if h.sessions > 0)
    then = (
        "their users logged off after the notice"
        if spec.strategy is UpdateStrategy.FORCE_LOGOFF
        else "each replaced when its last session ends"
    )
    message = (
        f"{base.updated} host(s) updated, {len(outdated)} outdated "
        f"({waiting} with sessions: {then})"
    )
    return replace(
        base,
        message=message,
        replace=tuple(made_for),
        delete=tuple(delete),
        delete_first=tuple(delete_first),
        drain=tuple(drain),
        canary_passed=spec.canary is not None,
    )
