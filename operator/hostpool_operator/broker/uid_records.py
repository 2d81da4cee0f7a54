"""The uids the broker allocates for single sign-on, recorded in the cluster so that every
replica, every restart and every host gives a user the same uid, and no two users one.

Two ConfigMaps a user, in the broker's namespace, each made with a plain create (which the
API server grants once per name):

- ``uid-<n>`` holds uid ``n`` for one user: whoever creates it first owns the uid;
- ``uid-user-<hash of the user>`` names the user's uid: the answer for every later call.

A user's record is read first. Without one the broker tries the uids ``logon.uids``
proposes: a ``uid-<n>`` that exists belongs to someone (skipped), unless it is the user's own
from an attempt cut short. Two replicas allocating for one user at once may both claim a
uid; the user record they both then create decides (the second reads the first's), and the
loser's uid stays claimed by that user, never given to another."""

from __future__ import annotations

import logging

from ..kube.client import JSON, KubeClient
from ..kube.errors import ApiError
from ..logon import uids

log = logging.getLogger(__name__)

CONFIGMAPS = "configmaps"
LABEL = "hostpool.io/uid-record"


class UidRecords:
    """The allocations of one namespace, cached once read (a record never changes)."""

    def __init__(self, client: KubeClient, namespace: str) -> None:
        self.client = client
        self.namespace = namespace
        self.known: dict[str, int] = {}

    async def uid_of(self, user: str) -> int:
        """The user's uid: the one recorded, else a new allocation (recorded). Raises
        :class:`~..logon.uids.UidError` when none can be had, :class:`ApiError` and
        ``ApiTransportError`` when the API server refuses or is away."""
        if user in self.known:
            return self.known[user]
        recorded = await self._recorded(user)
        uid = recorded if recorded is not None else await self._allocate(user)
        self.known[user] = uid
        return uid

    async def _get(self, name: str) -> JSON | None:
        try:
            return await self.client.get(CONFIGMAPS, self.namespace, name, api_version="v1")
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    async def _create(self, name: str, data: dict[str, str]) -> bool:
        """Whether this call made it (False: it exists already)."""
        body = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": name, "labels": {LABEL: "true"}},
            "data": data,
        }
        try:
            await self.client.create(CONFIGMAPS, self.namespace, body, api_version="v1")
        except ApiError as exc:
            if exc.status == 409:
                return False
            raise
        return True

    async def _recorded(self, user: str) -> int | None:
        record = await self._get(uids.record_name(user))
        if record is None:
            return None
        data = record.get("data") or {}
        if data.get("user") != user or not str(data.get("uid", "")).isdigit():
            # A hash collision or a hand-made record: never guess, say so.
            raise uids.UidError(f"the uid record {uids.record_name(user)} is not this user's")
        return int(data["uid"])

    async def _allocate(self, user: str) -> int:
        taken: set[int] = set()
        while True:
            for uid in uids.candidates(user, taken):
                name = uids.uid_record_name(uid)
                if not await self._create(name, {"user": user}):
                    holder = ((await self._get(name)) or {}).get("data") or {}
                    if holder.get("user") != user:
                        taken.add(uid)
                        continue
                return await self._record(user, uid)
            # Every candidate of this round was someone's: the next round looks further.

    async def _record(self, user: str, uid: int) -> int:
        """The user's record naming ``uid``; or, when another replica recorded the user
        first, the uid it recorded."""
        if await self._create(uids.record_name(user), {"user": user, "uid": str(uid)}):
            log.info("allocated uid %d", uid)
            return uid
        recorded = await self._recorded(user)
        if recorded is None:
            raise uids.UidError("the user's uid record vanished while it was made")
        return recorded
