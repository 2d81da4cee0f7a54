"""``kubectl hostpool assign HOST USER`` and ``unassign HOST``: give a personal pool's host
to its one user, or take it back (``spec.assignedUser``), as an administrator does for a
pool with ``personal.assignment: Direct`` (or to move a user in an Automatic one).

Refused in one line, before anything is written: a host of a Pooled pool, a host that is
someone else's (unassign it first), a user who has a host in the pool already, a host that
keeps another user's files. The API server refuses taking a host from its user while a
session is on it, and says so.

A host with a workload the operator made holds its user's files (the workload and its
volume claims). ``unassign`` has the operator delete them before anyone else is given the
host; ``unassign --keep-data`` keeps them, and the host, for that user alone
(``spec.keepData``). The operator does both whoever writes ``spec.assignedUser``: these
commands only ask for it and say what follows."""

from __future__ import annotations

import argparse
from typing import Any

from ..engine.records import HostRecord
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


def _kept_for(record: HostRecord) -> str | None:
    """The former user whose files the host keeps for them (None: it keeps nobody's)."""
    kept = record.spec is not None and record.spec.keep_data
    return record.data_of if kept and record.holds_data else None


async def _assign(target: Target, args: argparse.Namespace) -> int:
    host = await _host(target, args.host)
    pool = await _personal_pool_of(target, host)
    owner = _user_of(host)
    if owner == args.user:
        print(f"{args.host} is {args.user}'s already")
        return 0
    if owner is not None:
        raise CliError(f"{args.host} is {owner}'s: unassign it first")
    record = HostRecord.of(host)
    kept_for = _kept_for(record)
    if kept_for not in (None, args.user):
        raise CliError(
            f"{args.host} keeps {kept_for}'s files for them (unassign --keep-data): only "
            f"{kept_for} may be assigned it; `kubectl hostpool unassign {args.host}` deletes "
            "the files"
        )
    hosts = (await target.client.list(HOSTS, target.ns))["items"]
    for other in hosts:
        same_pool = (other.get("spec") or {}).get("poolRef", {}).get("name") == pool
        if same_pool and _user_of(other) == args.user:
            name = other["metadata"]["name"]
            raise CliError(f"{args.user} has host {name} in pool {pool} already")
    version = str(host["metadata"]["resourceVersion"])
    patch: dict[str, Any] = {"spec": {"assignedUser": args.user}}
    if kept_for is not None:
        patch["spec"]["keepData"] = None  # theirs again: kept no longer
    await target.client.patch(HOSTS, target.ns, args.host, patch, resource_version=version)
    print(f"{args.host} assigned to {args.user} (pool {pool})")
    former = record.data_of if record.holds_data else None
    if former not in (None, args.user):
        print(f"{former}'s files on it are deleted before {args.user} is placed there")
    return 0


async def _unassign(target: Target, args: argparse.Namespace) -> int:
    host = await _host(target, args.host)
    await _personal_pool_of(target, host)
    owner = _user_of(host)
    record = HostRecord.of(host)
    version = str(host["metadata"]["resourceVersion"])
    if args.keep_data and not record.holds_data:
        raise CliError(
            f"--keep-data: {args.host} has no workload the operator made, so it keeps no "
            "files of its user's"
        )
    patch: dict[str, Any]
    if owner is None:
        kept_for = _kept_for(record)
        if kept_for is not None and not args.keep_data:
            patch = {"spec": {"keepData": None}}
            await target.client.patch(HOSTS, target.ns, args.host, patch, resource_version=version)
            print(f"{args.host} is not assigned; {kept_for}'s files kept on it are deleted now")
            return 0
        print(f"{args.host} is not assigned")
        return 0
    keep = True if args.keep_data else None
    patch = {"spec": {"assignedUser": None, "keepData": keep}}
    await target.client.patch(HOSTS, target.ns, args.host, patch, resource_version=version)
    print(f"{args.host} unassigned (was {owner}'s)")
    if args.keep_data:
        print(f"its files are kept for {owner}: only {owner} may be assigned it again")
    elif record.holds_data:
        print(
            f"its workload and volume claims ({owner}'s files) are deleted before anyone "
            "else is given it"
        )
    return 0


def assign_command(args: argparse.Namespace) -> int:
    if not args.user.strip() or any(ord(c) < 32 or ord(c) == 127 for c in args.user):
        raise CliError("USER must be a user name, without control characters")
    return run(args, _assign)


def unassign_command(args: argparse.Namespace) -> int:
    return run(args, _unassign)
