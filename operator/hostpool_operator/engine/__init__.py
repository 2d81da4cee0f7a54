"""The placement engine, pure: where a new session goes and what each observation changes.

Functions of observed state and ``now``; no I/O, no clock, no event loop. From the bottom:
``demand``, ``ledger`` and ``horizon``; ``records`` (what is kept of each API object);
``balancing`` (the algorithms) and ``workloads`` (the gate a host's workload puts on new
sessions); ``host_views`` (a pool's hosts as the engine sees them); ``pool_state`` (one
pool's state, owning its host views) and ``status`` (every status body); ``placement`` (the
placement pass).
"""
