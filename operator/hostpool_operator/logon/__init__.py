"""Single sign-on to the desktop: the one-time logon credential the broker mints and the
host checks offline (``credential``), and the rules for the uid an identity gets on every
host (``uids``). Pure: the callers pass the clock, the keys and the random bytes."""
