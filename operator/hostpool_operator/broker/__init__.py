"""``hostpool-broker``: where users log on. It checks the caller's OIDC token, the pool's
entitlements, creates or reuses the caller's SessionRequest, waits for the operator to place
it and hands the client its connection (JSON, or the ``.rdp`` file itself).

Stateless: the SessionRequest is the state, so any number of replicas serve behind one
Service, and a broker killed mid-connect loses nothing (the client's retry finds the same
request, by its name)."""
