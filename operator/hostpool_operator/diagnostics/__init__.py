"""Logon diagnostics: where the time of each connect went, and why one failed. Pure: the
connects a request keeps (``status.connects``), each component's share of them, and what
the help desk is told."""
