"""Ended sessions within one replica (no shared record): ending one refuses it at once and
calls what waits on it (a relay, an event stream) once; waiters that stopped waiting are not
called; a session ended already calls a new waiter at once; records go at their end."""

from __future__ import annotations

import asyncio
import time

from hostpool_operator.broker.signin.sign_outs import SignOuts

SID = "s" * 22


def test_ending_a_session_refuses_it_and_calls_its_waiters_once() -> None:
    sign_outs = SignOuts()
    called: list[str] = []
    sign_outs.on_end(SID, lambda: called.append("relay"))
    forget = sign_outs.on_end(SID, lambda: called.append("gone"))
    sign_outs.on_end("t" * 22, lambda: called.append("other"))
    forget()
    asyncio.run(sign_outs.end(SID, time.time() + 3600))
    assert sign_outs.is_ended(SID)
    assert not sign_outs.is_ended("t" * 22)
    assert called == ["relay"]
    asyncio.run(sign_outs.end(SID, time.time() + 3600))
    assert called == ["relay"]
    sign_outs.on_end(SID, lambda: called.append("late"))
    assert called == ["relay", "late"]


def test_a_record_is_dropped_once_its_session_would_have_ended() -> None:
    sign_outs = SignOuts()
    asyncio.run(sign_outs.end(SID, time.time() - 10))
    asyncio.run(sign_outs.end("t" * 22, time.time() + 3600))
    assert not sign_outs.is_ended(SID)
    assert sign_outs.is_ended("t" * 22)
