"""Pure decisions of the broker: who may use which pool, which request a connect goes to,
what the caller is answered, and the ``.rdp`` file. Functions of observed state and ``now``
only (no I/O, no clock); the broker program (``hostpool_operator.broker``) gathers the state
and applies the answers."""
