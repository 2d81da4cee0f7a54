"""Image updates, decided: which of a pool's hosts are outdated against its host template, and
what replaces them when (``step``). Pure, like ``scaling``: the controller gathers the hosts,
asks :func:`~.step.decide`, and writes what it says.
"""
