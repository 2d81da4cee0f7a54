"""The plan recommender, pure: a pool's session history (``history``), its demand per
weekday and minute (``demand_curve``), a counting model of the plan rules (``model``), the
search over plan shapes (``search``), the replay of finalists through the timeline simulator
(``evaluation``), the reasons and the report; ``recommender.recommend`` ties them together.
Its inputs from outside (the history file, Prometheus) are in ``sources``, the only I/O."""
