"""``hostpool-operator``: the operator's command line (run, crds, simulate, recommend-plan)."""
