"""The simulators, pure: a scenario (``run_scenario``: requests placed one after another)
and a timeline (``run_timeline``: a day or a week of logons, or a recorded history, with
scaling and plans) and the timeline's report (table and plot). The replay under the
timeline is also what the plan recommender (``hostpool_operator.recommend``) runs plans
through."""

from __future__ import annotations

from .scenario import ScenarioError as ScenarioError
from .scenario import run_scenario as run_scenario
from .timeline import run_timeline as run_timeline
from .timeline_document import TimelineError as TimelineError
from .timeline_document import parse_timeline as parse_timeline
