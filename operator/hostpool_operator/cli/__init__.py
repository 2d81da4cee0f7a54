"""``hostpool-operator``: the operator's command line. ``parser`` builds it, one module a
command (``run``, ``crds``, ``simulate``, ``recommend``: recommend-plan) does the work, and
``main`` runs it and reports errors the one way (``errors``)."""
