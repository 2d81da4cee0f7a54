"""``kubectl hostpool assign HOST USER`` and ``unassign HOST``: give a personal pool's host
to its one user, or take it back (``spec.assignedUser``), as an administrator does for a
pool with ``personal.assignment: Direct`` (or to move a user in an Automatic one).

Refused in one line, before anything is written: a host of a Pooled pool, a host that is
someone else's (unassign it first), a user who has a host in the pool already. The API
server refuses taking a host from its user while a session is on it, and says so."""

from __future__ import annotations

import argparse
from typing import Any

from ..kube.errors import ApiError
from .errors import CliError
from .sessions import HOSTS, POOLS, Target, run


async def _host(target: Target, name: str) -> dict[str, Any]:
    try:
        host: dict[str, Any] = await target.client.get(HOSTS, target.ns, name)
    except ApiError as error:
        if error.status == 404:
            raise CliError(f"no host {name!r} in namespace {target.ns!r}") from None
        raise
    return host


async def _personal_pool_of(target: Target, host: dict[str, Any]) -> str:
    """The host's pool, which must be Personal."""
    pool = str((host.get("spec") or {}).get("poolRef", {}).get("name", ""))
    try:
        found = await target.client.get(POOLS, target.ns, pool)
    except ApiError as error:
        if error.status == 404:
            raise CliError(
                f"host {host['metadata']['name']!r}: its pool {pool!r} does not exist"
            ) from None
        raise
    if (found.get("spec") or {}).get("type") != "Personal":
        raise CliError(
            f"pool {pool!r} is Pooled: hosts are assigned to users only in Personal pools"
        )
    return pool


def _user_of(host: dict[str, Any]) -> str | None:
    user = (host.get("spec") or {}).get("assignedUser")
    return str(user) if user is not None else None


async def _assign(target: Target, args: argparse.Namespace) -> int:
    host = await _host(target, args.host)
    pool = await _personal_pool_of(target, host)
    owner = _user_of(host)
    if owner == args.user:
        print(f"{args.host} is {args.user}'s already")
        return 0
    if owner is not None:
        raise CliError(f"{args.host} is {owner}'s: unassign it first")
    hosts = (await target.client.list(HOSTS, target.ns))["items"]
    for other in hosts:
        same_pool = (other.get("spec") or {}).get("poolRef", {}).get("name") == pool
        if same_pool and _user_of(other) == args.user:
            name = other["metadata"]["name"]
            raise CliError(f"{args.user} has host {name} in pool {pool} already")
    version = str(host["metadata"]["resourceVersion"])
    patch = {"spec": {"assignedUser": args.user}}
    await target.client.patch(HOSTS, target.ns, args.host, patch, resource_version=version)
    print(f"{args.host} assigned to {args.user} (pool {pool})")
    return 0


async def _unassign(target: Target, args: argparse.Namespace) -> int:
    host = await _host(target, args.host)
    await _personal_pool_of(target, host)
    owner = _user_of(host)
    if owner is None:
        print(f"{args.host} is not assigned")
        return 0
    version = str(host["metadata"]["resourceVersion"])
    patch = {"spec": {"assignedUser": None}}
    await target.client.patch(HOSTS, target.ns, args.host, patch, resource_version=version)
    print(f"{args.host} unassigned (was {owner}'s)")
    return 0


def assign_command(args: argparse.Namespace) -> int:
    if not args.user.strip() or any(ord(c) < 32 or ord(c) == 127 for c in args.user):
        raise CliError("USER must be a user name, without control characters")
    return run(args, _assign)


def unassign_command(args: argparse.Namespace) -> int:
    return run(args, _unassign)
