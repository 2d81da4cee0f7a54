"""The recommendation's plot: over a typical week, the demand (in hosts' worth of sessions)
and the hosts of the recommended plan and of both baselines, as replayed.

Pure apart from writing the plot file (as ``report``); matplotlib is imported only here.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

_DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")


def plot_recommendation(
    out: Path,
    *,
    title: str,
    demand: Sequence[Sequence[float]],
    series: Sequence[tuple[str, Sequence[Sequence[float]]]],
    slot_minutes: int = 15,
) -> None:
    """``demand`` and each of ``series`` (label, values) are seven days (Monday first)
    of one value per slot; drawn as steps over one week, 900 x 500 pixels."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    slots = len(demand[0])
    hours = [i * slot_minutes / 60 for i in range(7 * slots)]

    def flat(week: Sequence[Sequence[float]]) -> list[float]:
        return [v for day in week for v in day]

    fig, ax = plt.subplots(figsize=(9, 5))
    ax.fill_between(
        hours,
        flat(demand),
        step="post",
        color="#bbbbbb",
        alpha=0.6,
        lw=0,
        label="demand (sessions / maxSessionLimit)",
    )
    colours = ("#4477aa", "#ee7733", "#cc3311", "#228833", "#aa3377")
    for (label, week), colour in zip(series, colours, strict=False):
        dashed = label.lower().startswith("always")
        ax.step(
            hours,
            flat(week),
            where="post",
            color=colour,
            lw=1.4,
            ls="--" if dashed else "-",
            label=label,
        )
    ax.set_xlim(0, 7 * 24)
    ax.set_xticks([24 * d for d in range(7)])
    ax.set_xticklabels(_DAYS, ha="left")
    ax.set_ylim(bottom=0)
    ax.set_ylabel("hosts (mean over the weeks)")
    ax.grid(axis="y", alpha=0.3)
    ax.grid(axis="x", alpha=0.2)
    ax.legend(loc="center right", fontsize="small", frameon=False)  # over the quiet weekend
    ax.set_title(title, loc="left", fontsize="medium")
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
