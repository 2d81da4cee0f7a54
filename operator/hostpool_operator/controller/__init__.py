"""The operator: one worker per pool (gather, decide, apply), the watches that feed them,
the Lease, metrics and kopf's wiring.

``controller.pool`` is one pool's I/O; ``manager`` routes watch events to the workers and
owns every task; ``handlers`` is what kopf runs.
"""
