"""``kubectl hostpool`` (and ``hostpool-operator sessions``): an administrator's work on
users' sessions. It reads pools, hosts and requests, and writes only what it is asked to:
a merge patch of ``status.logoff``, ``status.disconnect`` or ``status.notice`` of a request
(the host's agent acts on them), or ``spec.drainMode`` of a host; what it prints is
``session_views``'. It logs in as kubectl does (``kube.kubeconfig``): ``--kubeconfig``,
``KUBECONFIG``, ``--context``, and the context's namespace unless ``-n`` names one.

Every failure is one line (``CliError``, exit 1): no such pool, host or session; the API
server's refusal (a 403 names the verb and resource the identity lacks); an API server
that does not answer."""

from __future__ import annotations

import argparse
import asyncio
import json
import ssl
import sys
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from ..api.request import MAX_NOTICE
from ..api.timestamps import parse_time, rfc3339
from ..kube.client import KubeClient
from ..kube.errors import ApiError, ApiTransportError
from ..kube.kubeconfig import KubeconfigError, ToolLogin, load_login
from .errors import CliError, UsageError
from .session_views import (
    Session,
    SessionFilter,
    drain_progress,
    host_table,
    human_duration,
    parse_duration,
    pool_table,
    session_json,
    session_table,
    sessions,
    users_on,
)

POOLS, HOSTS, REQUESTS = "hostpools", "sessionhosts", "sessionrequests"
#: Seconds between two looks at a draining host's sessions (``drain --wait``).
DRAIN_POLL = 2.0
DEFAULT_LOGOFF_MESSAGE = "An administrator is logging you off. Save your work."
DEFAULT_DRAIN_MESSAGE = (
    "This host is going into maintenance: you will be logged off. Save your work."
)


@dataclass(frozen=True, slots=True)
class Target:
    """Where a command works: a logged-in client and the namespace (None: all)."""

    client: KubeClient
    login: ToolLogin
    namespace: str | None

    @property
    def ns(self) -> str:
        """The one namespace of a command that works in one."""
        return self.namespace or self.login.namespace


Body = Callable[[Target, argparse.Namespace], Awaitable[int]]


def _namespace(args: argparse.Namespace, login: ToolLogin) -> str | None:
    if getattr(args, "all_namespaces", False):
        return None
    return str(args.namespace or login.namespace)


def run(args: argparse.Namespace, body: Body) -> int:
    """Log in, run ``body`` with a client, and turn every way the API can fail into one
    line."""
    try:
        login = load_login(args.kubeconfig, args.context)
    except KubeconfigError as error:
        raise CliError(str(error)) from None
    server = login.info.server
    try:
        client = KubeClient(login.info, max_connections=8, token_file=login.token_file)
    except (OSError, ssl.SSLError, ValueError) as error:
        raise CliError(f"context {login.context!r}: cannot use its TLS settings: {error}") from None

    async def main() -> int:
        async with client:
            return await body(Target(client, login, _namespace(args, login)), args)

    try:
        return asyncio.run(main())
    except ApiTransportError as error:
        cause = error.__cause__ or error
        raise CliError(f"cannot reach the API server {server}: {cause}") from None
    except ApiError as error:
        raise CliError(refusal(error, login.context)) from None
    except KeyboardInterrupt:
        return 130


def refusal(error: ApiError, context: str) -> str:
    """The API server's refusal in one line (its own message names the verb, the resource
    and the identity of a 403)."""
    if error.status == 401:
        return f"the API server does not accept the credentials of context {context!r} (401)"
    if error.status == 403:
        said = error.message
        return said if "forbidden" in said.lower() else f"forbidden: {said}"
    return f"the API server answered {error.status} {error.reason}: {error.message}"


def _count(n: int) -> str:
    return f"{n} session{'s' if n != 1 else ''}"


def now() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


def _text(value: str, flag: str) -> str:
    text = value.strip()
    if not text:
        raise UsageError(f"{flag}: give the text to show")
    if len(text) > MAX_NOTICE:
        raise UsageError(f"{flag}: {len(text)} characters, at most {MAX_NOTICE}")
    return text


def duration(value: str, flag: str) -> timedelta:
    try:
        return parse_duration(value)
    except ValueError as error:
        raise UsageError(f"{flag}: {error}") from None


# --------------------------------------------------------------------------- reading


async def _list(target: Target, plural: str, namespace: str | None) -> list[dict[str, Any]]:
    try:
        items: list[dict[str, Any]] = (await target.client.list(plural, namespace))["items"]
    except ApiError as error:
        if error.status == 404:
            raise CliError(
                f"the API server serves no {plural}.hostpool.io (are the CRDs installed?)"
            ) from None
        raise
    return items


async def _require(target: Target, plural: str, name: str, namespace: str | None) -> None:
    """CliError unless the pool or host ``name`` exists in ``namespace`` (None: any)."""
    kind = "pool" if plural == POOLS else "host"
    if namespace is None:
        found = await _list(target, plural, None)
        if not any(o.get("metadata", {}).get("name") == name for o in found):
            raise CliError(f"no {kind} {name!r} in any namespace")
        return
    try:
        await target.client.get(plural, namespace, name)
    except ApiError as error:
        if error.status == 404:
            raise CliError(f"no {kind} {name!r} in namespace {namespace!r}") from None
        raise


async def _sessions(target: Target, selected: SessionFilter) -> list[Session]:
    return sessions(await _list(target, REQUESTS, target.namespace), selected)


async def _user_sessions(target: Target, user: str, pool: str) -> list[Session]:
    await _require(target, POOLS, pool, target.ns)
    found = await _sessions(target, SessionFilter(pool=pool, user=user))
    if not found:
        raise CliError(f"user {user!r} has no session in pool {pool!r} (namespace {target.ns!r})")
    return found


async def _patch_status(target: Target, session: Session, status: Mapping[str, Any]) -> None:
    await target.client.patch_status(REQUESTS, session.namespace, session.request, status)


# --------------------------------------------------------------------------- commands


async def _list_sessions(target: Target, args: argparse.Namespace) -> int:
    if args.pool:
        await _require(target, POOLS, args.pool, target.namespace)
    if args.host:
        await _require(target, HOSTS, args.host, target.namespace)
    found = await _sessions(target, SessionFilter(args.pool, args.host, args.user))
    if args.output == "json":
        print(json.dumps(session_json(found), indent=2))
    elif not found:
        where = f"namespace {target.namespace}" if target.namespace else "any namespace"
        print(f"No sessions found in {where}.", file=sys.stderr)
    else:
        wide, every = args.output == "wide", target.namespace is None
        print(session_table(found, now(), wide=wide, namespaces=every))
    return 0


async def _logoff(target: Target, args: argparse.Namespace) -> int:
    wait: timedelta = args.wait_for
    message = args.message or DEFAULT_LOGOFF_MESSAGE
    found = await _user_sessions(target, args.user, args.pool)
    deadline = now() + wait
    for session in found:
        body = {"message": message, "deadline": rfc3339(deadline), "limit": None, "shownAt": None}
        await _patch_status(target, session, {"logoff": body})
        when = f"in {human_duration(wait)}" if wait else "now"
        print(f"{session.user} on {session.host}: logoff {when} ({rfc3339(deadline)})")
    return 0


async def _disconnect(target: Target, args: argparse.Namespace) -> int:
    found = await _user_sessions(target, args.user, args.pool)
    for session in found:
        body = {"requestedAt": rfc3339(now()), "doneAt": None, "limit": None}
        await _patch_status(target, session, {"disconnect": body})
        print(f"{session.user} on {session.host}: disconnect requested")
    return 0


def _message_filter(args: argparse.Namespace) -> SessionFilter:
    if args.user and not args.pool:
        raise UsageError("--user needs --pool (a user has a session per pool)")
    if not args.pool and not args.host:
        raise UsageError("say whom to tell: --pool P, --host H or --user U --pool P")
    return SessionFilter(pool=args.pool, host=args.host, user=args.user)


async def _message(target: Target, args: argparse.Namespace) -> int:
    selected: SessionFilter = args.selected
    text: str = args.text
    if selected.pool:
        await _require(target, POOLS, selected.pool, target.ns)
    if selected.host:
        await _require(target, HOSTS, selected.host, target.ns)
    found = await _sessions(target, selected)
    if selected.user and not found:
        raise CliError(
            f"user {selected.user!r} has no session in pool {selected.pool!r} "
            f"(namespace {target.ns!r})"
        )
    sent = rfc3339(now())
    for session in found:
        body = {"message": text, "sentAt": sent, "shownAt": None, "limit": None}
        await _patch_status(target, session, {"notice": body})
    users = ", ".join(sorted({s.user for s in found}))
    print(
        f"message sent to {len(found)} session{'s' if len(found) != 1 else ''}"
        + (f": {users}" if users else "")
    )
    return 0


async def _set_drain(target: Target, host: str, drain: bool) -> bool:
    """Set the host's drainMode; True when it changed."""
    try:
        current = await target.client.get(HOSTS, target.ns, host)
    except ApiError as error:
        if error.status == 404:
            raise CliError(f"no host {host!r} in namespace {target.ns!r}") from None
        raise
    if bool((current.get("spec") or {}).get("drainMode")) == drain:
        return False
    await target.client.patch(HOSTS, target.ns, host, {"spec": {"drainMode": drain}})
    return True


async def _logoff_host(target: Target, host: str, after: timedelta, message: str) -> None:
    """Give each session on the host a logoff ``after`` from now; a session that already
    has an earlier one keeps it."""
    deadline = now() + after
    found = await _sessions(target, SessionFilter(host=host))
    kept = 0
    for session in found:
        earlier = parse_time((session.logoff or {}).get("deadline"))
        if earlier is not None and earlier <= deadline:
            kept += 1
            continue
        body = {"message": message, "deadline": rfc3339(deadline), "limit": None, "shownAt": None}
        await _patch_status(target, session, {"logoff": body})
    given = len(found) - kept
    print(
        f"{host}: {given} session{'s' if given != 1 else ''} to be logged off at "
        f"{rfc3339(deadline)}" + (f" ({kept} already due earlier)" if kept else "")
    )


async def _users_now(target: Target, host: str) -> set[str] | None:
    """The host's users now; None when the API did not answer this time (a wait rides
    out a blip)."""
    try:
        return users_on(await _list(target, REQUESTS, target.ns), host)
    except ApiTransportError:
        return None
    except ApiError as error:
        if error.status >= 500 or error.status == 429:
            return None
        raise


async def _wait_empty(target: Target, host: str, timeout: timedelta | None) -> int:
    users = await _users_now(target, host) or set()
    if users:
        print(
            f"{host}: waiting for {_count(len(users))}: {', '.join(sorted(users))}",
            flush=True,
        )
    ends = None if timeout is None else time.monotonic() + timeout.total_seconds()
    while users:
        if ends is not None and time.monotonic() >= ends:
            raise CliError(
                f"timed out after {human_duration(timeout or timedelta())}: {len(users)} "
                f"session{'s' if len(users) != 1 else ''} left on {host} "
                f"({', '.join(sorted(users))})"
            )
        await asyncio.sleep(DRAIN_POLL)
        seen = await _users_now(target, host)
        if seen is None:
            continue
        for line in drain_progress(host, users, seen):
            print(line, flush=True)
        users = seen
    print(f"{host} has no sessions", flush=True)
    return 0


def check_drain(args: argparse.Namespace) -> None:
    """Read ``drain``'s durations into ``args`` (``UsageError`` for a bad one)."""
    args.after = duration(args.logoff_after, "--logoff-after") if args.logoff_after else None
    args.wait_timeout = duration(args.timeout, "--timeout") if args.timeout else None
    if args.timeout and not args.wait:
        raise UsageError("--timeout is for --wait")
    if args.message and args.after is None:
        raise UsageError("--message is the logoff's: give --logoff-after too")
    args.message = _text(args.message, "--message") if args.message else DEFAULT_DRAIN_MESSAGE


async def _drain(target: Target, args: argparse.Namespace) -> int:
    after: timedelta | None = args.after
    timeout: timedelta | None = args.wait_timeout
    message: str = args.message
    changed = await _set_drain(target, args.host, True)
    print(
        f"{args.host} {'drained' if changed else 'already draining'}: no new sessions", flush=True
    )
    if after is not None:
        await _logoff_host(target, args.host, after, message)
    if args.wait:
        return await _wait_empty(target, args.host, timeout)
    return 0


async def _undrain(target: Target, args: argparse.Namespace) -> int:
    changed = await _set_drain(target, args.host, False)
    print(f"{args.host} {'undrained' if changed else 'was not draining'}: takes new sessions")
    return 0


async def _top(target: Target, args: argparse.Namespace) -> int:
    del args
    pools = await _list(target, POOLS, target.namespace)
    hosts = await _list(target, HOSTS, target.namespace)
    every = target.namespace is None
    if not pools and not hosts:
        where = f"namespace {target.namespace}" if target.namespace else "any namespace"
        print(f"No pools found in {where}.", file=sys.stderr)
        return 0
    print(pool_table(pools, namespaces=every))
    if hosts:
        print()
        print(host_table(hosts, namespaces=every))
    return 0


def list_command(args: argparse.Namespace) -> int:
    return run(args, _list_sessions)


def logoff_command(args: argparse.Namespace) -> int:
    args.wait_for = duration(args.in_, "--in")
    args.message = _text(args.message, "--message") if args.message is not None else None
    return run(args, _logoff)


def disconnect_command(args: argparse.Namespace) -> int:
    return run(args, _disconnect)


def message_command(args: argparse.Namespace) -> int:
    args.selected = _message_filter(args)
    args.text = _text(args.text, "TEXT")
    return run(args, _message)


def drain_command(args: argparse.Namespace) -> int:
    check_drain(args)
    return run(args, _drain)


def undrain_command(args: argparse.Namespace) -> int:
    return run(args, _undrain)


def top_command(args: argparse.Namespace) -> int:
    return run(args, _top)
