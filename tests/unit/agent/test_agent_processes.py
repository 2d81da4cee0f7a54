"""Which processes the agent takes for xrdp sessions and which it signals at a logoff: pure
functions of a process table (pid, parent, uid, exe, command line).

A session's X server is the real Xorg binary (its /proc/PID/exe), started by xrdp-sesman's
session process: every process between the X server and sesman is root's (a user cannot
make a root process their parent). A logoff signals only processes of the session's uid, and
never the agent, its ancestors or pid 1.
"""

from __future__ import annotations

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st

from hostpool_operator.agent.xrdp import (
    LogoffPlan,
    Process,
    XrdpSession,
    logoff_plan,
    protected_pids,
    xrdp_sessions,
)

XORG = "/usr/lib/xorg/Xorg"
SESMAN = "/usr/sbin/xrdp-sesman"
BASH = "/usr/bin/bash"
XORG_ARGS = (":10", "-auth", ".Xauthority", "-config", "xrdp/xorg.conf", "-noreset")
FAKE = ("Xorg", ":99", "-config", "xrdp/xorg.conf")
USERS = {0: "root", 1000: "alice", 1001: "bob", 1002: "mallory"}
UNREADABLE = None


def proc(
    pid: int, parent: int, uid: int, exe: str | None, *cmdline: str, name: str = ""
) -> Process:
    command = cmdline or ((exe or "?"),)
    return Process(
        pid=pid,
        parent=parent,
        user=USERS.get(uid, str(uid)),
        name=name or (exe or command[0]).rsplit("/", 1)[-1][:15],
        cmdline=command,
        uid=uid,
        exe=exe,
    )


#: A real xrdp 0.9 host, as root with CAP_SYS_PTRACE sees it (every exe readable).
HOST = [
    proc(1, 0, 0, "/usr/lib/systemd/systemd"),
    proc(100, 1, 0, SESMAN, SESMAN, "-n"),  # the daemon
    proc(200, 100, 0, SESMAN, SESMAN, "-n"),  # alice's session process
    proc(201, 200, 1000, XORG, XORG, *XORG_ARGS),
    proc(202, 200, 1000, "/usr/bin/twm", "twm"),
    proc(203, 200, 1000, "/usr/sbin/xrdp-chansrv", "/usr/sbin/xrdp-chansrv"),
    proc(204, 202, 1000, "/usr/bin/xterm", "xterm"),
    proc(300, 100, 0, SESMAN, SESMAN, "-n"),  # bob's
    proc(301, 300, 1001, XORG, XORG, ":11", *XORG_ARGS[1:]),
    proc(302, 300, 1001, "/bin/dash", "/bin/sh", "/home/bob/.xsession"),
    proc(400, 1, 1002, XORG, XORG, ":0"),  # a console X server: not xrdp's
    proc(500, 1, 0, "/opt/hostpool/bin/python3", "hostpool-agent", "--sessions-from", "xrdp"),
]
AGENT = 500


def unreadable(table: list[Process]) -> list[Process]:
    """The table as a container's root without CAP_SYS_PTRACE reads it: no user's exe."""
    return [p if p.uid == 0 else dataclasses.replace(p, exe=UNREADABLE) for p in table]


def test_the_sessions_of_a_real_host() -> None:
    assert xrdp_sessions(HOST) == [
        XrdpSession(10, "alice", 200, 201, 1000, ".Xauthority"),
        XrdpSession(11, "bob", 300, 301, 1001, ".Xauthority"),
    ]


def test_a_logoff_terms_the_window_manager_then_kills_what_is_left_of_the_session() -> None:
    assert logoff_plan("alice", HOST, AGENT) == LogoffPlan(
        displays=(10,), term=(202,), kill=(201, 202), servers=(201,)
    )
    assert logoff_plan("bob", HOST, AGENT) == LogoffPlan(
        displays=(11,), term=(302,), kill=(301, 302), servers=(301,)
    )
    assert logoff_plan("carol", HOST, AGENT) == LogoffPlan(displays=(), term=(), kill=())


# -- the fakes: a user's process with an X server's command line ------------------------------

#: ``exec -a Xorg bash :99 -config xrdp/xorg.conf`` by mallory under a root process that has
#: another root child: a process re-parented to a pod's init (in a sidecar pod: the agent
#: and the desktop's entrypoint are its children).
SIDECAR_POD = [
    proc(1, 0, 0, "/pause", "/pause"),
    proc(7, 1, 0, "/usr/bin/bash", "/bin/sh", "/usr/local/lib/entrypoint.sh"),
    proc(8, 7, 0, SESMAN, SESMAN, "-n"),
    proc(9, 1, 0, "/opt/venv/bin/python3", "hostpool-agent"),
    proc(66, 1, 1002, BASH, *FAKE),
]


def test_exec_a_xorg_is_not_a_session() -> None:
    assert xrdp_sessions(SIDECAR_POD) == []
    # Also where the fake's exe cannot be read (a container's root without CAP_SYS_PTRACE).
    assert xrdp_sessions(unreadable(SIDECAR_POD)) == []
    plan = logoff_plan("mallory", SIDECAR_POD, 9)
    assert plan == LogoffPlan(displays=(), term=(), kill=())


def test_the_real_xorg_binary_outside_an_xrdp_session_is_not_a_session() -> None:
    # Under pid 1, under a root shell, under a user's own process inside a real session.
    for parent in (1, 7):
        table = [*SIDECAR_POD, proc(67, parent, 1002, XORG, XORG, *FAKE[1:])]
        assert xrdp_sessions(table) == [], parent
    inside = [*HOST, proc(600, 204, 1000, XORG, XORG, *FAKE[1:])]  # from alice's xterm
    assert [s.xorg for s in xrdp_sessions(inside)] == [201, 301]


def test_a_copy_of_xorg_in_a_users_directory_is_not_the_real_binary() -> None:
    table = [*HOST[:3], proc(201, 200, 1000, "/home/alice/Xorg", "/home/alice/Xorg", *XORG_ARGS)]
    assert xrdp_sessions(table) == []
    # A replaced (upgraded) binary still running is the real one.
    deleted = [*HOST[:3], proc(201, 200, 1000, XORG + " (deleted)", XORG, *XORG_ARGS)]
    assert [s.xorg for s in xrdp_sessions(deleted)] == [201]


def test_a_session_process_must_be_roots_and_the_real_sesman() -> None:
    users_sesman = [*HOST[:2], proc(200, 100, 1002, SESMAN, SESMAN), *HOST[3:4]]
    assert xrdp_sessions(users_sesman) == []
    # A root process named like sesman that runs another binary is not sesman.
    renamed = [HOST[0], proc(200, 1, 0, BASH, "xrdp-sesman", name="xrdp-sesman"), HOST[3]]
    assert xrdp_sessions(renamed) == []


def test_where_exes_cannot_be_read_the_x_server_must_be_a_direct_child_named_xorg() -> None:
    """A container's root without CAP_SYS_PTRACE reads root's exes but not the users': the
    X server is then a child of the session process itself whose name (the kernel's, from
    the file it runs) is Xorg. The only child of a session process that its user controls is
    their own window manager, so a fake there is a session of a user who has one."""
    blind = unreadable(HOST)
    assert [s.xorg for s in xrdp_sessions(blind)] == [201, 301]
    grandchild = [*blind[:4], proc(205, 204, 1000, UNREADABLE, XORG, *XORG_ARGS, name="Xorg")]
    assert [s.xorg for s in xrdp_sessions(grandchild)] == [201]
    named_bash = [*blind[:3], proc(201, 200, 1000, UNREADABLE, *FAKE, name="bash")]
    assert xrdp_sessions(named_bash) == []


# -- what a logoff may signal -------------------------------------------------------------------


def test_a_logoff_never_signals_root_the_agent_or_its_ancestors() -> None:
    # A session process with a root child (a helper sesman started) and the agent itself
    # started under a session process (as if the window manager were its parent).
    table = [
        *HOST,
        proc(205, 200, 0, "/usr/bin/helper", "helper"),
        proc(700, 202, 1000, "/usr/bin/python3", "hostpool-agent"),
        proc(701, 700, 1000, "/usr/bin/python3", "worker"),
    ]
    plan = logoff_plan("alice", table, 701)
    assert 205 not in plan.term + plan.kill
    assert {202, 700, 701}.isdisjoint(plan.term + plan.kill)
    assert plan.kill == (201,)
    assert protected_pids(table, 701) == {0, 1, 200, 100, 202, 700, 701}


def test_a_process_of_mixed_uids_is_never_signalled() -> None:
    # A setuid program that alice started: real uid alice, effective root (uid -1 here).
    table = [*HOST, proc(206, 200, -1, "/usr/bin/passwd", "passwd")]
    assert 206 not in logoff_plan("alice", table, AGENT).term


# -- properties over any process table -----------------------------------------------------------

EXES = [XORG, XORG + " (deleted)", SESMAN, BASH, "/home/mallory/Xorg", UNREADABLE]
NAMES = ["Xorg", "xrdp-sesman", "bash", "twm", "xrdp-chansrv"]
COMMANDS = [
    (XORG, *XORG_ARGS),
    FAKE,
    (XORG, ":12", "-config", "xrdp/xorg.conf"),
    ("twm",),
    ("xrdp-chansrv",),
    (SESMAN, "-n"),
]


@st.composite
def tables(draw: st.DrawFn) -> tuple[list[Process], int, str]:
    pids = draw(st.lists(st.integers(1, 60), min_size=1, max_size=25, unique=True))
    table = [
        proc(
            pid,
            draw(st.sampled_from([0, *pids])),
            draw(st.sampled_from([0, 1000, 1001, 1002, -1])),
            draw(st.sampled_from(EXES)),
            *draw(st.sampled_from(COMMANDS)),
            name=draw(st.sampled_from(NAMES)),
        )
        for pid in pids
    ]
    agent = draw(st.sampled_from(pids))
    user = draw(st.sampled_from(["root", "alice", "bob", "mallory"]))
    return table, agent, user


def ancestors(table: list[Process], pid: int) -> set[int]:
    parents = {p.pid: p.parent for p in table}
    found: set[int] = set()
    while pid in parents and pid not in found:
        found.add(pid)
        pid = parents[pid]
    return found


@settings(max_examples=200)
@given(tables())
def test_a_logoff_signals_only_the_sessions_uid_never_the_agent_or_its_ancestors(
    drawn: tuple[list[Process], int, str],
) -> None:
    table, agent, user = drawn
    by_pid = {p.pid: p for p in table}
    sessions = [s for s in xrdp_sessions(table) if s.user == user]
    plan = logoff_plan(user, table, agent)
    uids = {s.uid for s in sessions}
    for pid in plan.term + plan.kill:
        assert by_pid[pid].uid in uids, (pid, by_pid[pid], sessions)
        assert by_pid[pid].uid >= 0
        assert pid not in ancestors(table, agent) | {0, 1, agent}
    assert set(plan.term) <= set(plan.kill)


@settings(max_examples=200)
@given(tables())
def test_every_session_is_a_real_x_server_under_a_root_sesman(
    drawn: tuple[list[Process], int, str],
) -> None:
    table, _, _ = drawn
    by_pid = {p.pid: p for p in table}
    for session in xrdp_sessions(table):
        xorg = by_pid[session.xorg]
        assert xorg.uid == session.uid >= 0
        if xorg.exe is None:
            assert xorg.name == "Xorg"
            assert xorg.parent == session.leader
        else:
            assert xorg.exe.removesuffix(" (deleted)") == XORG
        leader = by_pid[session.leader]
        assert leader.uid == 0
        assert leader.exe == SESMAN
        step = by_pid[xorg.parent]
        while step.pid != session.leader:  # only root's processes between
            assert step.uid == 0
            step = by_pid[step.parent]
