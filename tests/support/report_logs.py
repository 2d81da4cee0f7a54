"""Logs attached to a failed test's report, besides the API server's and the operator's."""

from __future__ import annotations

from collections.abc import Callable

import pytest

#: Further logs a fixture attaches to a failed test's report (e.g. host agents'): pairs of a
#: section title and a function reading the log; tests/e2e/conftest.py attaches them. Defined
#: here, not in conftest.py: pytest imports conftest under its own name, and a key must be
#: one object for every importer.
EXTRA_LOGS = pytest.StashKey[list[tuple[str, Callable[[], str]]]]()
