"""The agent's shell commands (load script, sessions, notify, logoff): run with a timeout,
the whole process group killed when it overruns."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class CommandResult:
    ok: bool
    output: str
    problem: str = ""


async def run_command(
    command: str, timeout: float, env: Mapping[str, str] | None = None
) -> CommandResult:
    """Run a shell command; its stdout, or what went wrong (exit code, timeout)."""
    try:
        process = await asyncio.create_subprocess_shell(
            command,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env={**os.environ, **(env or {})},
            start_new_session=True,
        )
    except OSError as error:
        return CommandResult(False, "", f"could not start: {error}")
    try:
        async with asyncio.timeout(timeout):
            out, err = await process.communicate()
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        await process.wait()
        return CommandResult(False, "", f"did not finish within {timeout:.0f}s")
    text = out.decode(errors="replace")
    if process.returncode != 0:
        detail = err.decode(errors="replace").strip().splitlines()[-1:] or [""]
        return CommandResult(False, text, f"exited with {process.returncode} {detail[0]}".strip())
    return CommandResult(True, text)
