"""Where the recommender's history comes from: a JSON-lines file (``history_file``) or the
operator's own metrics in Prometheus (``prometheus``). The only I/O of ``recommend``; each
source refuses with a ``SourceError`` whose message names the file, or the server and the
pool."""


class SourceError(Exception):
    """The history could not be read, or is unusable; the message says what and where."""
