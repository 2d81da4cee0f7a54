"""Single sign-on at the broker: for a placed request in a pool with
``connection.singleSignOn``, a one-time logon credential (``logon.credential``) for the
caller on that host, with the uid the caller's token names (``--uid-claim``) or the one the
broker allocates (``uid_records``). Native clients get it in the connect answer (``logon``:
user, password, expiresAt); the ``.rdp`` file never holds it. The key is ``--logon-key-file``
(Ed25519, PEM); its public half is what the hosts trust."""

from __future__ import annotations

import datetime as dt
import logging
import secrets
import time
from dataclasses import dataclass, replace
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from ..access.connect import Answer, Caller, error
from ..access.views import RequestView
from ..api.timestamps import rfc3339
from ..kube.errors import ApiError, ApiTransportError
from ..logon import credential, uids
from .gate import api_failure
from .metrics import BrokerMetrics
from .uid_records import UidRecords

log = logging.getLogger(__name__)

DEFAULT_LIFETIME = 60


@dataclass(frozen=True)
class SignOnSettings:
    #: The broker's signing key (None: no single sign-on from this broker).
    key: Ed25519PrivateKey | None = None
    #: Seconds a credential is good for (at most ``credential.MAX_LIFETIME``).
    lifetime: int = DEFAULT_LIFETIME


def read_key(path: Path) -> Ed25519PrivateKey:
    """``--logon-key-file``: an Ed25519 private key (PEM, PKCS#8); ValueError names why not."""
    try:
        return credential.private_key(path.read_bytes())
    except OSError as exc:
        raise ValueError(f"{path}: {exc.strerror or exc}") from None
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{path}: {exc}") from None


class SignOn:
    """Mints the credentials of the broker's callers."""

    def __init__(
        self, settings: SignOnSettings, records: UidRecords | None, metrics: BrokerMetrics
    ) -> None:
        self.settings = settings
        self.records = records
        self.metrics = metrics

    async def grant(self, caller: Caller, request: RequestView) -> credential.Grant | Answer:
        """What the caller is signed on to the request's host with, or the refusal."""
        if self.settings.key is None:
            return self._refused(
                error(503, "SingleSignOnUnavailable", "this broker has no logon key", 30)
            )
        uid = caller.uid
        if uid is None:
            if self.records is None:
                message = "this broker reads no uid claim and keeps no uid records"
                return self._refused(error(503, "SingleSignOnUnavailable", message, 30))
            try:
                uid = await self.records.uid_of(caller.user)
            except uids.UidError as exc:
                return self._refused(error(403, "NoUid", str(exc)))
            except (ApiError, ApiTransportError) as exc:
                return self._refused(api_failure(exc))
        assert request.host is not None
        return credential.Grant(caller.user, request.host, request.uid, uid)

    def mint(self, grant: credential.Grant) -> tuple[str, int]:
        """(the credential, when it ends: epoch seconds)."""
        assert self.settings.key is not None
        now = int(time.time())
        nonce = secrets.token_bytes(credential.NONCE_BYTES)
        text = credential.mint(self.settings.key, grant, now, self.settings.lifetime, nonce)
        self.metrics.logon_credentials.labels("Minted").inc()
        return text, now + self.settings.lifetime

    async def with_logon(self, answer: Answer, caller: Caller, request: RequestView) -> Answer:
        """The connect answer with ``logon`` for a native client (or the refusal)."""
        grant = await self.grant(caller, request)
        if isinstance(grant, Answer):
            return grant
        password, ends = self.mint(grant)
        expires = rfc3339(dt.datetime.fromtimestamp(ends, dt.UTC))
        logon = {"user": caller.user, "password": password, "expiresAt": expires}
        headers = {**answer.headers, "Cache-Control": "no-store"}
        return replace(answer, body={**answer.body, "logon": logon}, headers=headers)

    def _refused(self, answer: Answer) -> Answer:
        self.metrics.logon_credentials.labels(answer.reason).inc()
        log.warning("single sign-on refused: %s", answer.body.get("message", answer.reason))
        return answer
