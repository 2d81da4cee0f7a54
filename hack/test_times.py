"""The suite's time by tier, from the JUnit reports ``make test`` writes: how many tests each
directory of tests/ holds and the seconds they took, added up (the workers ran them at once:
the sum is the work, not the wait). Usage: python hack/test_times.py [REPORT.xml ...]"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ElementTree
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REPORTS = tuple(
    ROOT / ".cluster" / f"test-report{part}.xml" for part in ("", "-solo", "-solo-faults")
)
TIERS = ("unit", "api", "chart", "e2e/desktop", "e2e/faults", "e2e")


def tier_of(classname: str) -> str:
    path = classname.replace(".", "/")
    for tier in TIERS:
        if path.startswith(f"tests/{tier}/"):
            return tier
    return "other"


def main(argv: list[str]) -> int:
    reports = [Path(a) for a in argv] or [p for p in REPORTS if p.exists()]
    if not reports:
        print("no report: run make test first", file=sys.stderr)
        return 1
    count: dict[str, int] = defaultdict(int)
    seconds: dict[str, float] = defaultdict(float)
    for report in reports:
        for case in ElementTree.parse(report).iter("testcase"):
            tier = tier_of(case.get("classname", ""))
            count[tier] += 1
            seconds[tier] += float(case.get("time", "0"))
    print(f"{'tier':<14}{'tests':>7}{'seconds':>10}")
    for tier in sorted(count, key=lambda t: -seconds[t]):
        print(f"{tier:<14}{count[tier]:>7}{seconds[tier]:>10.0f}")
    print(f"{'all':<14}{sum(count.values()):>7}{sum(seconds.values()):>10.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
