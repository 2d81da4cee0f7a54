"""Scaling rules, pure: how many hosts a pool needs, and what a scaling plan decides.

``rules`` (hosts to add and remove from counts), ``plans`` (a plan's phase and rules),
``pool`` (scaling as one pool's state shows it, a plan merged in), ``plan_pool`` (a plan as
one pool sees it) and ``plan_binding`` (which pool follows which plan).
"""
