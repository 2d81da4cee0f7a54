"""The command line's one error style: a command raises ``UsageError`` when the command line
or a file it names is wrong (exit 2, as argparse's own errors) and ``CliError`` when it
cannot do what was asked (exit 1); ``main`` prints either as one line,
``hostpool-operator: error: MESSAGE``, without a traceback."""

from __future__ import annotations


class CliError(Exception):
    """The command failed; the message says what and where."""

    exit_code = 1


class UsageError(CliError):
    """The command line or an input it names is wrong: what to fix is on the caller's side."""

    exit_code = 2
