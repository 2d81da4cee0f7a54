"""``kubectl hostpool diagnose USER``: why a person's logon was slow or failed. Each of
their recent connects (``status.connects`` of their requests) as a timeline of its phases,
the slowest against the pool's median for that phase, and for a failure the phase, the
reason in words and the Event behind it. ``--id REF`` finds one connect by the reference the
person was shown.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from typing import Any

from ..api.request import CONNECT_REF_PATTERN
from ..diagnostics import timeline
from ..diagnostics.connects import connects_of
from ..kube.errors import ApiError
from .errors import CliError
from .sessions import REQUESTS, Target, run

REF = re.compile(CONNECT_REF_PATTERN)


async def _events(target: Target, names: set[str]) -> list[dict[str, Any]]:
    """The namespace's Events about these objects (requests and hosts)."""
    try:
        listing = await target.client.list("events", target.ns, api_version="v1")
    except ApiError:
        return []  # no right to read Events: the report goes without them
    return [e for e in listing["items"] if (e.get("involvedObject") or {}).get("name") in names]


async def _diagnose(target: Target, args: argparse.Namespace) -> int:
    try:
        requests = (await target.client.list(REQUESTS, target.ns))["items"]
    except ApiError as error:
        if error.status == 404:
            raise CliError("the API server serves no sessionrequests.hostpool.io") from None
        raise
    if args.pool:
        requests = [r for r in requests if timeline.pool_of(r) == args.pool]
    theirs = [r for r in requests if timeline.user_of(r) == args.user]
    found = [
        timeline.Seen(timeline.pool_of(r), r["metadata"]["name"], c, None)
        for r in theirs
        for c in connects_of(timeline.status_of(r))
        if args.id is None or c.get("ref") == args.id
    ]
    where = f"namespace {target.ns}" + (f", pool {args.pool}" if args.pool else "")
    if not found:
        what = f"connect {args.id} of {args.user}" if args.id else f"connects of {args.user}"
        if not theirs:
            what = f"requests of {args.user}"
        print(f"No {what} in {where}.", file=sys.stderr)
        return 1
    failed = [s for s in found if s.connect.get("outcome") == "Failed"]
    if failed:
        names = {s.request for s in failed} | {
            str(timeline.status_of(r).get("host"))
            for r in theirs
            if timeline.status_of(r).get("host")
        }
        events = await _events(target, names)
        found = [
            timeline.Seen(s.pool, s.request, s.connect, timeline.explaining(events, s.connect))
            if s in failed
            else s
            for s in found
        ]
    medians = timeline.medians(requests)
    if args.output == "json":
        print(json.dumps(timeline.as_json(found, medians), indent=2))
    else:
        print("\n".join(timeline.lines(found, medians)))
    return 0


def diagnose_command(args: argparse.Namespace) -> int:
    if args.id is not None and not REF.fullmatch(args.id):
        raise CliError(f"--id {args.id!r}: a reference is 8 capital letters and digits 2-7")
    return run(args, _diagnose)
