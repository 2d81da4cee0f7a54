"""What ``hostpool-agent`` was told on its command line (``program``), as its parts read it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class AgentOptions:
    host: str
    namespace: str
    interval: float = 30.0
    load_script: str | None = None
    sessions_command: str | None = None
    notify_command: str | None = None
    logoff_command: str | None = None
    disconnect_command: str | None = None
    command_timeout: float = 10.0
    address: str | None = None
    #: Where sessions come from without a sessions command: "users" (the machine's logged-in
    #: users, all Active) or "xrdp" (the xrdp instance beside the agent).
    sessions_from: str = "users"
    #: The single sign-on verifier's state directory, whose refusals become Events (None:
    #: none are read).
    logon_state: str | None = None
    #: The host's RDP certificate (PEM): with sessions from xrdp, a path in the xrdp's file
    #: system (None: what its xrdp.ini names); else in the agent's (None: none published).
    rdp_certificate: str | None = None
