"""What a timeline run looks like: a table of one line per simulated hour, and a plot of
hosts, sessions, pending requests and used capacity with the plan's phases as bands.

Pure apart from writing the plot file; the run itself is ``timeline.run_timeline``.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Any


def format_timeline_table(result: dict[str, Any]) -> str:
    """One line per simulated hour (the first step at or after each full hour, and the
    last step), then a summary line. A run with Disconnected sessions has a DISC column
    (Disconnected sessions at that step), and what the session limits did and the notes
    come before the summary."""
    steps = result["steps"]
    with_disconnected = any(s.get("disconnected") for s in steps)
    header = f"{'AT':<19}  {'PHASE':<8}  {'ALGORITHM':<12}  HOSTS  SESSIONS  PENDING  USED%"
    lines = [header + ("   DISC" if with_disconnected else "")]
    mark: datetime | None = None
    for i, step in enumerate(steps):
        at = datetime.fromisoformat(step["at"])
        if mark is None:
            hour = at.replace(minute=0, second=0, microsecond=0)
            mark = hour if hour == at else hour + timedelta(hours=1)
        if at < mark and i != len(steps) - 1:
            continue
        mark = at.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
        line = (
            f"{step['at']:<19}  {step['phase'] or '-':<8}  {step['loadBalancerType']:<12}  "
            f"{step['hosts']:>5}  {step['sessions']:>8}  {step['pending']:>7}  "
            f"{step['usedCapacityPercent']:>5}"
        )
        lines.append(line + (f"  {step.get('disconnected', 0):>5}" if with_disconnected else ""))
    lines.append("")
    lines.extend(_limit_lines(result))
    lines.extend(_update_lines(result))
    peak_hosts = max((s["hosts"] for s in steps), default=0)
    lines.append(
        f"host-hours {result['hostHours']:g}; placed {result['placed']} sessions; "
        f"peak pending {result['peakPending']}; peak hosts {peak_hosts}"
    )
    return "\n".join(lines)


def _update_lines(result: dict[str, Any]) -> list[str]:
    """When the image update completed, and the sessions a ForceLogoff ended."""
    update = result.get("update")
    if not update:
        return []
    if update["tookMinutes"] is None:
        when = "did not complete within the run"
    else:
        when = f"completed {update['tookMinutes']:g} min after it started"
    return [
        f"image update at minute {update['startedMinutes']:g}: {when}; sessions ended by it "
        f"{update['sessionsEnded']}; peak hosts meanwhile {update['peakHosts']}"
    ]


def _limit_lines(result: dict[str, Any]) -> list[str]:
    """What the session limits did (when they did anything, or sessions were left
    Disconnected) and the run's notes."""
    ended: dict[str, int] = result.get("sessionsEndedByLimits", {})
    disconnected: dict[str, int] = result.get("sessionsDisconnectedByLimits", {})
    hours = result.get("disconnectedSessionHours", 0)
    lines: list[str] = []
    if any(ended.values()) or any(disconnected.values()) or hours:
        by_limit = ", ".join(f"{limit} {count}" for limit, count in ended.items())
        line = f"session-hours Disconnected {hours:g}; "
        line += f"logged off by limits {sum(ended.values())} ({by_limit})"
        if any(disconnected.values()):
            by_limit = ", ".join(f"{limit} {count}" for limit, count in disconnected.items())
            line += f"; disconnected by limits {sum(disconnected.values())} ({by_limit})"
        lines.append(line)
    lines.extend(f"note: {note}" for note in result.get("notes", []))
    return lines


def plot_timeline(result: dict[str, Any], out: Path, *, title: str) -> None:
    """Hosts, sessions, pending requests and used capacity over time, one panel each, the
    plan's phases as shaded bands."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt

    steps = result["steps"]
    times = [datetime.fromisoformat(s["at"]) for s in steps]
    series = [
        ("hosts", "hosts", "#4477aa"),
        ("sessions", "sessions", "#228833"),
        ("pending", "pending", "#ee6677"),
        ("usedCapacityPercent", "used capacity %", "#aa3377"),
    ]
    fig, axes = plt.subplots(len(series), 1, sharex=True, figsize=(11, 8))
    colours = {"RampUp": "#ccddaa", "Peak": "#eedd88", "RampDown": "#ffcccc", "OffPeak": "#dddddd"}
    bands = _phase_bands(steps, times)
    for ax, (key, label, colour) in zip(axes, series, strict=True):
        for phase, begin, end in bands:
            ax.axvspan(begin, end, color=colours.get(phase, "#eeeeee"), alpha=0.6, lw=0)
        ax.step(times, [s[key] for s in steps], where="pre", color=colour)
        ax.set_ylabel(label)
        ax.set_ylim(bottom=0)
        ax.grid(axis="y", alpha=0.3)
    if any(s.get("disconnected") for s in steps):
        # Of the sessions, those left Disconnected (still holding their slots).
        disconnected = [s.get("disconnected", 0) for s in steps]
        axes[1].step(times, disconnected, where="pre", color="#999933", linestyle="--")
        axes[1].legend(["all", "disconnected"], loc="upper left", fontsize="small", frameon=False)
    if bands:
        from matplotlib.patches import Patch

        seen = list(dict.fromkeys(phase for phase, _, _ in bands))
        handles = [Patch(color=colours.get(p, "#eeeeee"), label=p) for p in seen]
        axes[0].legend(
            handles=handles,
            loc="lower right",
            bbox_to_anchor=(1.0, 1.0),
            ncols=len(seen),
            fontsize="small",
            frameon=False,
        )
    axes[-1].xaxis.set_major_formatter(mdates.DateFormatter("%a %H:%M"))  # type: ignore[no-untyped-call]
    axes[0].set_title(
        f"{title}: {result['hostHours']:g} host-hours, peak pending {result['peakPending']}",
        loc="left",
    )
    fig.autofmt_xdate()
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)


def _phase_bands(
    steps: list[dict[str, Any]], times: list[datetime]
) -> list[tuple[str, datetime, datetime]]:
    """(phase, from, to) for each run of steps in one phase (a step covers the time before
    its ``at``)."""
    bands: list[tuple[str, datetime, datetime]] = []
    for i, step in enumerate(steps):
        phase = step["phase"]
        if phase is None:
            continue
        if i:
            begin = times[i - 1]
        else:
            begin = times[0] - (times[1] - times[0] if len(times) > 1 else timedelta())
        if bands and bands[-1][0] == phase and bands[-1][2] == begin:
            bands[-1] = (phase, bands[-1][1], times[i])
        else:
            bands.append((phase, begin, times[i]))
    return bands
