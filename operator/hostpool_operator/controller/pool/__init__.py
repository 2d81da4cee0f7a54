"""One pool's I/O: its loop (``worker``) and the writers it drives: request status, pool and
host status, hosts, workloads and the pool's scaling plan."""
