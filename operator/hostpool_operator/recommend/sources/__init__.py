"""Where the recommender's history comes from: a JSON-lines file (``history_file``) or the
operator's own metrics in Prometheus (``prometheus``). The only I/O of ``recommend``."""
