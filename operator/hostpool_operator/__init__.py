"""hostpool-operator: load-balanced remote-desktop session hosts on Kubernetes."""

__version__ = "0.1.0"
