"""The names the operator writes on objects and the resources it asks for: labels,
annotations and the plurals of the hostpool.io kinds. The models own the kinds' plurals
(``HostPool.plural``...); these are the same names for code that has no model at hand."""

from __future__ import annotations

#: The resources (plurals) of the hostpool.io kinds.
POOLS, HOSTS, REQUESTS, PLANS = "hostpools", "sessionhosts", "sessionrequests", "scalingplans"

#: Label put on hosts the operator creates (scaling); only those are ever removed.
MANAGED_LABEL = "hostpool.io/managed-by"
MANAGER = "hostpool-operator"
#: Label naming the pool of a host the operator created.
POOL_LABEL = "hostpool.io/pool"
#: Annotation a scaling plan puts on a host it drains: when it drained it (RFC 3339). Only
#: hosts drained by a plan are undrained or deleted by it; a logoff deadline counts from it.
PLAN_DRAINED_ANNOTATION = "hostpool.io/drained-by-plan"
#: Label on every workload the operator creates, naming its SessionHost.
HOST_LABEL = "hostpool.io/host"
