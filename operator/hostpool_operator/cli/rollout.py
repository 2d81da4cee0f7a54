"""``kubectl hostpool rollout status|history|pause|resume|undo POOL``: a pool's image
update, as ``kubectl rollout`` does for a Deployment.

``status`` follows ``status.update`` until the update is Complete (exit 0) or Failed (exit 1,
with the cause); ``history`` lists the templates kept as ControllerRevisions; ``pause`` and
``resume`` set ``spec.update.paused``; ``undo`` puts an earlier template back (the previous
one, or ``--to-revision N``), which the operator then rolls out like any new one.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Mapping
from typing import Any

from ..kube.errors import ApiError
from ..rollout.history import APPS_V1, CONTROLLER_REVISIONS, KeptRevision, newest_first
from .errors import CliError
from .sessions import POOLS, Target, duration, run

#: Seconds between two looks at the pool (``rollout status``).
STATUS_POLL = 1.0
POOL_LABEL = "hostpool.io/pool"
JSON_PATCH = "application/json-patch+json"


async def _pool(target: Target, name: str) -> dict[str, Any]:
    try:
        pool: dict[str, Any] = await target.client.get(POOLS, target.ns, name)
    except ApiError as error:
        if error.not_found:
            raise CliError(f'HostPool "{name}" not found in namespace {target.ns}') from None
        raise
    return pool


def _update(pool: Mapping[str, Any]) -> dict[str, Any]:
    status = pool.get("status") if isinstance(pool.get("status"), Mapping) else {}
    assert isinstance(status, Mapping)
    found = status.get("update")
    return dict(found) if isinstance(found, Mapping) else {}


def _line(name: str, update: Mapping[str, Any]) -> str:
    phase = update.get("phase") or "no update yet"
    counts = f"{update.get('updatedHosts', 0)} updated, {update.get('outdatedHosts', 0)} outdated"
    return f'pool "{name}" revision {update.get("revision", "?")}: {phase}: ' + str(
        update.get("message") or counts
    )


async def _status(target: Target, args: argparse.Namespace) -> int:
    deadline = time.monotonic() + args.timeout.total_seconds() if args.timeout else None
    said = ""
    while True:
        pool = await _pool(target, args.pool)
        update = _update(pool)
        line = _line(args.pool, update)
        if line != said:
            print(line, flush=True)
            said = line
        phase = update.get("phase")
        if phase in (None, "Complete"):
            print(f'pool "{args.pool}": all hosts are on the current template')
            return 0
        if phase == "Failed":
            print(f'error: pool "{args.pool}": the update failed', file=sys.stderr)
            return 1
        if not args.watch:
            return 0
        if deadline is not None and time.monotonic() > deadline:
            print(f'error: pool "{args.pool}": timed out waiting for the update', file=sys.stderr)
            return 1
        await asyncio.sleep(STATUS_POLL)


async def _kept(target: Target, pool: str) -> list[KeptRevision]:
    listing = await target.client.list(
        CONTROLLER_REVISIONS, target.ns, api_version=APPS_V1,
        label_selector=f"{POOL_LABEL}={pool}",
    )  # fmt: skip
    return newest_first([k for obj in listing["items"] if (k := KeptRevision.of(obj)) is not None])


def _images(template: Mapping[str, Any]) -> str:
    """The container images of a template's workload (what an update usually changes)."""
    workload = template.get("workload") if isinstance(template.get("workload"), Mapping) else {}
    assert isinstance(workload, Mapping)
    spec = workload.get("spec") if isinstance(workload.get("spec"), Mapping) else {}
    assert isinstance(spec, Mapping)
    containers = spec.get("containers") if isinstance(spec.get("containers"), list) else []
    assert isinstance(containers, list)
    images = [str(c.get("image")) for c in containers if isinstance(c, Mapping) and c.get("image")]
    return ",".join(images) or "-"


async def _history(target: Target, args: argparse.Namespace) -> int:
    pool = await _pool(target, args.pool)
    current = _update(pool).get("revision")
    kept = await _kept(target, args.pool)
    if not kept:
        print(f'pool "{args.pool}": no revisions kept yet', file=sys.stderr)
        return 0
    rows = [("REVISION", "HASH", "CURRENT", "IMAGES", "CREATED")]
    for k in kept:
        mark = "*" if k.revision == current else ""
        rows.append((str(k.number), k.revision, mark, _images(k.template), k.created))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("   ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)))
    return 0


async def _set_paused(target: Target, args: argparse.Namespace) -> int:
    await _pool(target, args.pool)
    patch = {"spec": {"update": {"paused": args.paused}}}
    await target.client.patch(POOLS, target.ns, args.pool, patch)
    print(f'pool "{args.pool}" update {"paused" if args.paused else "resumed"}')
    return 0


async def _undo(target: Target, args: argparse.Namespace) -> int:
    pool = await _pool(target, args.pool)
    current = _update(pool).get("revision")
    kept = await _kept(target, args.pool)
    if args.to_revision is not None:
        chosen = next((k for k in kept if k.number == args.to_revision), None)
        if chosen is None:
            numbers = ", ".join(str(k.number) for k in kept) or "none"
            raise CliError(
                f"no revision {args.to_revision} of pool {args.pool!r} (kept: {numbers})"
            )
    else:
        chosen = next((k for k in kept if k.revision != current), None)
        if chosen is None:
            raise CliError(f"pool {args.pool!r} has no earlier revision to go back to")
    if chosen.revision == current:
        print(f'pool "{args.pool}" is on revision {chosen.number} already')
        return 0
    # The template is replaced whole, in one JSON patch on the version read (a merge patch
    # would keep fields the old template lacks), so nothing between sees a half template.
    operations = [
        {"op": "test", "path": "/metadata/resourceVersion",
         "value": pool["metadata"]["resourceVersion"]},
        {"op": "replace", "path": "/spec/scaling/hostTemplate", "value": dict(chosen.template)},
    ]  # fmt: skip
    path = target.client.path(POOLS, target.ns, args.pool)
    await target.client.request("PATCH", path, body=operations, content_type=JSON_PATCH)
    print(f'pool "{args.pool}" rolled back to revision {chosen.number} ({chosen.revision})')
    return 0


def status_command(args: argparse.Namespace) -> int:
    args.timeout = duration(args.timeout, "--timeout") if args.timeout else None
    return run(args, _status)


def history_command(args: argparse.Namespace) -> int:
    return run(args, _history)


def pause_command(args: argparse.Namespace) -> int:
    args.paused = True
    return run(args, _set_paused)


def resume_command(args: argparse.Namespace) -> int:
    args.paused = False
    return run(args, _set_paused)


def undo_command(args: argparse.Namespace) -> int:
    return run(args, _undo)
