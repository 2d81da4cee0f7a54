"""``hostpool-agent``: the program on every session host. It reports the host's load and
sessions and carries out logoffs; it may use only ``api`` and ``kube`` besides itself."""
