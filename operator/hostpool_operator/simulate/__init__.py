"""The simulators, pure: a scenario (``run_scenario``: requests placed one after another)
and a timeline (``run_timeline``: a day or a week of logons, or a recorded history, with
scaling and plans), the timeline's report (table and plot), and the plan recommender
(``recommend``: the cheapest plan that keeps every logon of a history within a wait)."""

from __future__ import annotations

from .scenario import ScenarioError as ScenarioError
from .scenario import run_scenario as run_scenario
from .timeline import TimelineError as TimelineError
from .timeline import parse_timeline as parse_timeline
from .timeline import run_timeline as run_timeline
