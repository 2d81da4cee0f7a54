"""The broker's session API: ``GET /v1/pools``, connect, and ending a session. Each handler
passes the :class:`~.gate.Gate`, gathers from the directory, asks the pure decisions in
``hostpool_operator.access`` and applies the answer (a request created, deleted or told to
log off)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import time
from dataclasses import dataclass

import orjson
from aiohttp import web

from ..access import connect as decisions
from ..access.connect import Answer, Caller, error
from ..access.names import is_namespace, is_object_name
from ..access.views import RequestView
from ..api import Phase
from ..api.timestamps import rfc3339
from ..api.vocabulary import CONNECT_ANNOTATION, REQUESTS
from ..diagnostics import connects
from ..kube.errors import ApiError, ApiTransportError
from . import connect_records
from .directory import Directory
from .gate import Gate, RefusalError, api_failure, printable
from .metrics import BrokerMetrics
from .signon import SignOn

log = logging.getLogger(__name__)

#: Label on every request the broker creates.
BROKER_LABEL = "hostpool.io/broker"
CONNECT_FIELDS = frozenset({"protocol"})


@dataclass(frozen=True)
class SessionSettings:
    connect_timeout: float = 30.0
    #: An agent whose figures are older than this (seconds) is not asked to log users off.
    agent_stale_after: float = 120.0
    #: Name the user in each connect's log line (--log-users); off, a user's name is not
    #: logged at all.
    log_users: bool = False


class Sessions:
    """The session API's routes."""

    def __init__(
        self,
        gate: Gate,
        directory: Directory,
        signon: SignOn,
        metrics: BrokerMetrics,
        settings: SessionSettings,
    ) -> None:
        self.gate = gate
        self.directory = directory
        self.signon = signon
        self.metrics = metrics
        self.settings = settings

    def routes(self) -> list[web.RouteDef]:
        base = "/v1/namespaces/{namespace}/pools/{pool}"
        return [
            web.get("/v1/pools", self.pools),
            web.post(f"{base}/connect", self.connect),
            web.delete(f"{base}/session", self.end_session),
        ]

    # ------------------------------------------------------------------ /v1/pools

    async def pools(self, request: web.Request) -> web.Response:
        async def listed() -> Answer:
            caller = await self.gate.caller(request)
            self.gate.ready()
            pools = self.directory.listing(caller.user, caller.groups)
            return Answer(200, "OK", {"pools": pools})

        return await self.gate.answer(request, "pools", listed)

    # ------------------------------------------------------------------ connect

    async def connect(self, request: web.Request) -> web.Response:
        started = time.perf_counter()
        clicked = dt.datetime.now(dt.UTC)
        user = "-"
        try:
            caller = await self.gate.caller(request)
            user = caller.user
            namespace, pool_name = self.gate.names(request)
            await self._connect_body(request)
            self.gate.ready()
            answer = await self._connect(namespace, pool_name, caller, (clicked, started))
        except RefusalError as refusal:
            answer = refusal.answer
        elapsed = time.perf_counter() - started
        self.metrics.connect_seconds.labels(str(answer.status)).observe(elapsed)
        # Only names that passed validation, and what else came from the caller escaped:
        # a line break in the path must not start a log line of its own.
        namespace, pool = request.match_info["namespace"], request.match_info["pool"]
        valid = is_namespace(namespace) and is_object_name(pool)
        log.info(
            "connect %s%s: %d %s (%s) in %.3fs",
            f"{namespace}/{pool}" if valid else "(an invalid name)",
            f" by {printable(user)}" if self.settings.log_users else "",
            answer.status,
            answer.reason,
            printable(str(answer.body.get("message", answer.body.get("host", "")))),
            elapsed,
        )
        return self.gate.send(request, "connect", answer)

    async def _connect_body(self, request: web.Request) -> None:
        if not request.can_read_body:
            return
        raw = await request.read()  # client_max_size: 413 past 16 KiB
        if not raw.strip():
            return
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise RefusalError(error(400, "InvalidBody", "the body is not JSON")) from None
        if not isinstance(body, dict):
            raise RefusalError(error(400, "InvalidBody", "the body is not a JSON object"))
        unknown = sorted(set(body) - CONNECT_FIELDS)
        if unknown:
            raise RefusalError(
                error(400, "InvalidBody", f"{unknown[0][:64]}: unknown field (only protocol)")
            )
        if "protocol" in body and body["protocol"] != "RDP":
            raise RefusalError(error(400, "InvalidBody", "protocol: only RDP is offered"))

    async def _connect(
        self, namespace: str, pool_name: str, caller: Caller, began: tuple[dt.datetime, float]
    ) -> Answer:
        """``began``: when the connect arrived (wall clock, and perf_counter)."""
        directory = self.directory
        key = (namespace, pool_name, caller.user)
        async with directory.user_lock(key):
            pool = directory.pools.get((namespace, pool_name))
            mine = directory.mine(namespace, pool_name, caller.user)
            decision = decisions.decide(namespace, pool_name, pool, caller, mine)
            if isinstance(decision, decisions.NotFound) or pool is None:
                return decisions.not_found(namespace, pool_name)
            if isinstance(decision, decisions.Ending):
                return decisions.waiting(decision.request, "SessionEnding")
            if isinstance(decision, decisions.Reuse):
                view, reused = decision.request, True
                if view.phase is Phase.ASSIGNED:
                    view = await self._reconnect(namespace, view, began)
            else:
                view, reused = await self._create(namespace, pool_name, caller, decision, began)
        if not decisions.placed_or_final(view):
            found = await directory.wait_for(
                (namespace, view.name),
                lambda v: v is None or decisions.placed_or_final(v),
                self.settings.connect_timeout,
            )
            if found is None:
                return decisions.waiting(view, "SessionEnding")
            view = found
        answer = decisions.answer(view, pool, caller, reused=reused)
        if answer.status == 200 and pool.connection.single_sign_on:
            answer = await self.signon.with_logon(answer, caller, view)
        return answer

    async def _reconnect(
        self, namespace: str, view: RequestView, began: tuple[dt.datetime, float]
    ) -> RequestView:
        """A connect to a session the caller has: a connect of its own on the request (a
        reconnect, for logon diagnostics)."""
        clicked, started = began
        ref = connects.reference(f"{namespace}/{view.name}/{rfc3339(clicked)}/{started}")
        client = self.directory.client
        seconds = time.perf_counter() - started
        if not await connect_records.begin_reconnect(
            client, namespace, view.name, ref, clicked, seconds
        ):
            return view
        return dataclasses.replace(view, connect_ref=ref)

    async def _create(
        self,
        namespace: str,
        pool_name: str,
        caller: Caller,
        decision: decisions.Create,
        began: tuple[dt.datetime, float],
    ) -> tuple[RequestView, bool]:
        """The caller's request, created (after deleting the failed one it replaces); a
        namesake that exists already (another replica, or this one before a restart, got
        there first) is taken over when it is the caller's."""
        client = self.directory.client
        if decision.replaces is not None:
            try:
                await client.delete(REQUESTS, namespace, decision.name, uid=decision.replaces.uid)
            except ApiError as exc:
                if exc.status not in (404, 409):
                    raise RefusalError(api_failure(exc)) from None
            except ApiTransportError as exc:
                raise RefusalError(api_failure(exc)) from None
        body = {
            "apiVersion": "hostpool.io/v1alpha1",
            "kind": "SessionRequest",
            "metadata": {
                "name": decision.name,
                "namespace": namespace,
                "labels": {BROKER_LABEL: "true"},
                # The connect this begins, for logon diagnostics: the operator carries it
                # into status.connects with its assignment (no write of the broker's own).
                "annotations": {CONNECT_ANNOTATION: _mark(namespace, decision.name, began)},
            },
            "spec": {"poolRef": {"name": pool_name}, "user": caller.user, "protocol": "RDP"},
        }
        try:
            created = await client.create(REQUESTS, namespace, body)
            return self.directory.observe(created), False
        except ApiError as exc:
            if exc.status != 409:
                raise RefusalError(api_failure(exc)) from None
        except ApiTransportError as exc:
            raise RefusalError(api_failure(exc)) from None
        try:
            existing = await client.get(REQUESTS, namespace, decision.name)
        except (ApiError, ApiTransportError) as exc:
            raise RefusalError(api_failure(exc)) from None
        view = RequestView.from_api(existing)
        if (view.pool, view.user) != (pool_name, caller.user):
            raise RefusalError(
                error(409, "NameTaken", f"request {decision.name} belongs to someone else")
            )
        if not view.live:
            # A failed or ending namesake: the caller comes back once it is replaced or gone.
            raise RefusalError(decisions.waiting(view, "SessionEnding"))
        self.directory.observe_view(view)
        return view, False

    # ------------------------------------------------------------------ end a session

    async def end_session(self, request: web.Request) -> web.Response:
        async def ended() -> Answer:
            caller = await self.gate.caller(request)
            namespace, pool_name = self.gate.names(request)
            self.gate.ready()
            self.gate.entitled(namespace, pool_name, caller)
            return await self._end(namespace, pool_name, caller)

        return await self.gate.answer(request, "session", ended)

    async def _end(self, namespace: str, pool_name: str, caller: Caller) -> Answer:
        directory = self.directory
        now = dt.datetime.now(dt.UTC)
        stale_after = self.settings.agent_stale_after
        ends = [
            (view, how)
            for view in directory.mine(namespace, pool_name, caller.user)
            if (
                how := decisions.end_by(
                    view,
                    directory.hosts.get((namespace, view.host)) if view.host else None,
                    now,
                    stale_after,
                )
            )
            is not None
        ]
        if not ends:
            return error(404, "NoSession", f"you have no session in {namespace}/{pool_name}")
        client = directory.client
        ended: list[str] = []
        for view, how in ends:
            try:
                if how == "logoff":
                    # The host's agent reports: it logs the user off now and deletes the
                    # request. (A silent agent never would: those requests are deleted.)
                    logoff = {"message": "Logged off at the user's request", "deadline": _now()}
                    await client.patch_status(
                        REQUESTS,
                        namespace,
                        view.name,
                        {"logoff": logoff},
                        resource_version=view.resource_version,
                    )
                else:
                    await client.delete(REQUESTS, namespace, view.name, uid=view.uid)
                ended.append(view.name)
            except ApiError as exc:
                if exc.status == 404:
                    continue
                if exc.status == 409:
                    # Changed meanwhile (e.g. just placed): delete it instead, the agent
                    # sees the session's request go.
                    try:
                        await client.delete(REQUESTS, namespace, view.name, uid=view.uid)
                        ended.append(view.name)
                    except ApiError as again:
                        if again.status != 404:
                            return api_failure(again)
                    continue
                return api_failure(exc)
            except ApiTransportError as exc:
                return api_failure(exc)
        body = {"requests": ended, "reason": "LogoffRequested"}
        return Answer(202, "LogoffRequested", body)


def _mark(namespace: str, name: str, began: tuple[dt.datetime, float]) -> str:
    """The broker's mark of a connect: its reference, when it began, and the broker's own
    seconds until it writes the request."""
    clicked, started = began
    ref = connects.reference(f"{namespace}/{name}/{rfc3339(clicked)}/{started}")
    return connects.BrokerMark(ref, clicked, time.perf_counter() - started).annotation()


def _now() -> str:
    return rfc3339(dt.datetime.now(dt.UTC))
