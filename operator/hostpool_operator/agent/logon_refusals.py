"""What the host's single sign-on verifier refused, read back for the agent's Events. The
verifier (``hostpool-logon``) keeps its last refusals as JSON lines, each with when (``at``),
the user and the reason (never the credential). Pure: the caller reads the file."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime

#: The verifier's file of refusals, in its state directory.
REFUSALS_FILE = "refusals.jsonl"
#: ... and of the logons it signed on: when each ended and the seconds it took.
LOGONS_FILE = "logons.jsonl"
#: The Event reason of a refusal that is about a home, not the credential.
HOME_REASON = "HomeOwnedByAnotherUser"
#: A reason the host's status takes (the API's pattern for lastLogonRefusal.reason).
REASON = re.compile(r"[A-Za-z][A-Za-z0-9]{0,63}")


@dataclass(frozen=True, slots=True)
class Refusal:
    at: float
    user: str
    reason: str

    @property
    def event_reason(self) -> str:
        """The host's Event reason: a home of another uid, else LogonRefused."""
        return HOME_REASON if self.reason == HOME_REASON else "LogonRefused"

    @property
    def message(self) -> str:
        return f"single sign-on of {self.user!r} refused: {self.reason}"

    def status_fields(self) -> dict[str, str]:
        """``status.agent.lastLogonRefusal``: when, and the reason if it is one word (the
        API server would refuse anything else, and the whole write with it)."""
        reason = self.reason if REASON.fullmatch(self.reason) else "Unknown"
        at = datetime.fromtimestamp(self.at, UTC).isoformat(timespec="seconds")
        return {"at": at.replace("+00:00", "Z"), "reason": reason}


def refusals_after(text: str, after: float) -> tuple[list[Refusal], float]:
    """The refusals of ``text`` later than ``after``, oldest first, and the latest time
    seen (``after`` when none is later). A line that cannot be read is passed over."""
    found: list[Refusal] = []
    latest = after
    for line in text.splitlines():
        try:
            record = json.loads(line)
            refusal = Refusal(float(record["at"]), str(record["user"]), str(record["reason"]))
        except (ValueError, KeyError, TypeError):
            continue
        if refusal.at > after:
            found.append(refusal)
            latest = max(latest, refusal.at)
    return found, latest


@dataclass(frozen=True, slots=True)
class Logon:
    """A logon the verifier signed on: when it ended (epoch seconds), how long it took."""

    at: float
    user: str
    seconds: float


def latest_logons(text: str) -> dict[str, Logon]:
    """Each user's last logon in the verifier's file (a line that cannot be read is passed
    over)."""
    found: dict[str, Logon] = {}
    for line in text.splitlines():
        try:
            record = json.loads(line)
            logon = Logon(float(record["at"]), str(record["user"]), float(record["seconds"]))
        except (ValueError, KeyError, TypeError):
            continue
        if 0 <= logon.seconds <= 3600:
            found[logon.user] = logon
    return found
