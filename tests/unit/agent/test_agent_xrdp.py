"""The agent's reading of an xrdp host: which X servers are xrdp sessions, which displays a
client is attached to (from /proc/net/unix as a real xrdp 0.9 host shows it), each user's
state, and which processes end a session."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hostpool_operator.agent.xrdp import (
    Process,
    XrdpSession,
    connected_displays,
    listening_displays,
    on_this_host,
    parse_passwd,
    session_states,
    window_managers,
    xorg_display,
    xrdp_sessions,
)

XORG = "/usr/lib/xorg/Xorg"
XORG_ARGS = ("-auth", ".Xauthority", "-config", "xrdp/xorg.conf", "-noreset", "-nolisten", "tcp")

# /proc/net/unix of a host with one session on :10 and a client attached (captured from a
# real host: the listening socket has flags 00010000 and state 01, the accepted one state 03).
ATTACHED = """\
Num       RefCount Protocol Flags    Type St Inode Path
00000000a726f587: 00000003 00000000 00000000 0001 03 569137 /run/xrdp/sockdir/xrdp_chansrv_socket_10
00000000a86eceba: 00000002 00000000 00010000 0001 01 569108 /run/xrdp/sockdir/xrdp_display_10
000000004fa7fdc3: 00000002 00000000 00000000 0002 01 569109 /run/xrdp/xrdp_disconnect_display_10
00000000113b7d31: 00000003 00000000 00000000 0001 03 569117 /run/xrdp/sockdir/xrdp_display_10
000000001111aaaa: 00000003 00000000 00000000 0001 03 569200
"""
DETACHED = "\n".join(line for line in ATTACHED.splitlines() if "569117" not in line)


@pytest.mark.parametrize(
    ("cmdline", "display"),
    [
        ((XORG, ":10", *XORG_ARGS), 10),
        (("Xorg", ":7", "-config", "/etc/X11/xrdp/xorg.conf"), 7),
        ((XORG, ":10"), None),  # no xrdp config: a console X server, not a session
        ((XORG, ":0", "-config", "xorg.conf"), None),
        ((XORG, "-config", "xrdp/xorg.conf"), None),  # no display
        ((XORG, ":x1", *XORG_ARGS), None),
        ((XORG, ":10", "-config"), None),
        (("/usr/bin/Xvfb", ":10", *XORG_ARGS), None),
        ((), None),
    ],
)
def test_xorg_display(cmdline: tuple[str, ...], display: int | None) -> None:
    assert xorg_display(cmdline) == display


def test_connected_displays_from_a_real_socket_table() -> None:
    assert connected_displays(ATTACHED) == {10}
    assert connected_displays(DETACHED) == set()
    assert connected_displays("") == set()
    assert connected_displays("Num RefCount\nbroken line\n") == set()


def test_listening_displays_are_this_hosts_sessions() -> None:
    assert listening_displays(ATTACHED) == {10}
    assert listening_displays(DETACHED) == {10}  # the session stays when the client goes
    assert listening_displays("Num RefCount\nzz: 1 0 nothex 0001 01 1 /x/xrdp_display_3\n") == set()


@pytest.mark.parametrize(
    ("netns", "own", "listening", "ours"),
    [
        (7, 7, set(), True),  # same namespace, whatever the sockets say
        (8, 7, {10}, False),  # another namespace: another host, even with display 10 here
        (None, 7, {10}, True),  # unreadable (a container without CAP_SYS_PTRACE): the socket
        (None, 7, {11}, False),
        (7, None, {10}, True),
    ],
)
def test_on_this_host(netns: int | None, own: int | None, listening: set[int], ours: bool) -> None:
    assert on_this_host(10, netns, own, listening) is ours


UIDS = {"root": 0, "alice": 1000, "bob": 1001, "carol": 1002}


def process(pid: int, parent: int, user: str, *cmdline: str) -> Process:
    name = cmdline[0].rsplit("/", 1)[-1]
    exe = cmdline[0] if cmdline[0].startswith("/") else f"/usr/sbin/{name}"
    return Process(pid, parent, user, name[:15], cmdline, uid=UIDS[user], exe=exe)


HOST = [
    process(100, 1, "root", "xrdp-sesman", "-n"),
    process(200, 100, "root", "xrdp-sesman", "-n"),  # alice's session leader
    process(201, 200, "alice", XORG, ":10", *XORG_ARGS),
    process(202, 200, "alice", "twm"),
    process(203, 200, "alice", "/usr/sbin/xrdp-chansrv"),
    process(204, 202, "alice", "xterm"),
    process(300, 100, "root", "xrdp-sesman", "-n"),  # bob's
    process(301, 300, "bob", XORG, ":11", *XORG_ARGS),
    process(302, 300, "bob", "/bin/sh", "/home/bob/.xsession"),
    process(400, 1, "carol", XORG, ":0"),  # not xrdp's
]


def test_sessions_and_their_states() -> None:
    sessions = xrdp_sessions(HOST)
    assert sessions == [
        XrdpSession(10, "alice", 200, 201, 1000, ".Xauthority"),
        XrdpSession(11, "bob", 300, 301, 1001, ".Xauthority"),
    ]
    assert session_states(sessions, {10}) == {"alice": "Active", "bob": "Disconnected"}
    assert session_states(sessions, set()) == {"alice": "Disconnected", "bob": "Disconnected"}
    assert session_states([], {10}) == {}


def test_a_user_with_two_sessions_is_active_when_either_has_a_client() -> None:
    two = [XrdpSession(10, "alice", 1, 2), XrdpSession(12, "alice", 3, 4)]
    assert session_states(two, {12}) == {"alice": "Active"}
    assert session_states(two, {10}) == {"alice": "Active"}


def test_the_window_manager_ends_the_session_not_the_x_server_or_channels() -> None:
    alice, bob = xrdp_sessions(HOST)
    assert window_managers(alice, HOST) == [202]  # twm; its xterm goes with the X server
    assert window_managers(bob, HOST) == [302]  # the user's ~/.xsession shell


@given(
    st.dictionaries(
        st.integers(0, 99), st.tuples(st.sampled_from(["a", "b", "c"]), st.booleans()), max_size=8
    )
)
def test_every_user_with_a_session_is_reported_once(spec: dict[int, tuple[str, bool]]) -> None:
    sessions = [XrdpSession(d, user, 1000 + d, 2000 + d) for d, (user, _) in spec.items()]
    connected = {d for d, (_, attached) in spec.items() if attached}
    states = session_states(sessions, connected)
    assert set(states) == {user for user, _ in spec.values()}
    for user, state in states.items():
        attached = any(u == user and a for u, a in spec.values())
        assert state == ("Active" if attached else "Disconnected")


def test_parse_passwd() -> None:
    text = "root:x:0:0:root:/root:/bin/bash\nalice:x:1000:1000::/home/alice:/bin/bash\n"
    text += "broken line\n:x:5:5::/:/bin/sh\nbob:x:notanumber:1::/:/bin/sh\nalice2:x:1000:1::/:/\n"
    assert parse_passwd(text) == {0: "root", 1000: "alice"}
