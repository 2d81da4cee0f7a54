"""`make bench-portal`: desktops in the browser through one broker (as root, with real xrdp
hosts): click -> first frame (median and p95 over BENCH_PORTAL_RUNS runs), the relay's CPU
per MiB relayed while a desktop draws, and BENCH_PORTAL_DESKTOPS (default 20) browser
desktops at once without a dropped session.

The set-up is the end-to-end suite's (its control plane, operator, Keycloak, xrdp hosts and
agents, the broker with the portal, chromium): the bench itself is hack/bench/portal_bench.py,
run here by pytest with the suite's conftest files as plugins. The last line of stdout is one
JSON object with the figures.

``portal.py relay_flood_bench.py`` runs another bench of this directory the same way
(`make bench-relay-flood`).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "hack" / "bench" / "portal_bench.py"
#: The suite's fixtures: the cluster, the end-to-end programs, the desktops.
PLUGINS = ("conftest", "e2e.conftest", "e2e.desktop.conftest")


def main() -> int:
    bench = ROOT / "hack" / "bench" / sys.argv[1] if len(sys.argv) > 1 else BENCH
    with tempfile.TemporaryDirectory(prefix=f"bench-{bench.stem}-") as work:
        out = Path(work) / "result.json"
        path = os.pathsep.join(filter(None, [str(ROOT / "tests"), os.environ.get("PYTHONPATH")]))
        env = {**os.environ, "BENCH_PORTAL_OUT": str(out), "PYTHONPATH": path}
        argv = [sys.executable, "-m", "pytest", str(bench), "-s", "-q", "-p", "no:cacheprovider"]
        argv += [arg for plugin in PLUGINS for arg in ("-p", plugin)]
        argv += ["--basetemp", str(Path(work) / "pytest")]
        code = subprocess.run(argv, cwd=ROOT, env=env, check=False).returncode
        if out.exists():
            print(out.read_text().replace("\n", " "))
        return code


if __name__ == "__main__":
    sys.exit(main())
