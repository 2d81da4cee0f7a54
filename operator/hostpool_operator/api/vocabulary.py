"""The names the operator writes on objects and the resources it asks for: labels,
annotations and the plurals of the hostpool.io kinds. The models own the kinds' plurals
(``HostPool.plural``...); these are the same names for code that has no model at hand."""

from __future__ import annotations

#: The resources (plurals) of the hostpool.io kinds.
POOLS, HOSTS, REQUESTS, PLANS = "hostpools", "sessionhosts", "sessionrequests", "scalingplans"

#: Label on every host (and its workload) the operator makes: the revision of the pool's host
#: template it was made from (status.update.revision is the current one).
TEMPLATE_REVISION_LABEL = "hostpool.io/template-revision"
#: Annotation the operator puts on an outdated host before it makes the host's replacement:
#: the new host's name. Written first, so a restart never makes a second replacement.
REPLACED_BY_ANNOTATION = "hostpool.io/replaced-by"
#: ... and the revision that replacement is of: a mark of another revision (a failed
#: update's canary, deleted since) names a host never to be made again under that name.
REPLACED_FOR_ANNOTATION = "hostpool.io/replaced-for-revision"
#: Annotation the operator puts on an outdated host it drains for an update (ForceLogoff):
#: when it drained it (RFC 3339); the users' logoff deadline counts from it.
UPDATE_DRAINED_ANNOTATION = "hostpool.io/drained-by-update"
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
#: Annotation the operator puts on a personal pool's host that has a workload it made: the
#: user whose files the workload and its volume claims hold, written before that user is
#: placed there and removed only once they are deleted. A session administrator cannot
#: change it (the session-admin policy), so no one skips the deletion by editing it.
DATA_OF_ANNOTATION = "hostpool.io/data-of"

#: Annotation the broker puts on a request it creates: the connect it began (JSON: its
#: reference, when it began, the broker's own seconds), which the operator carries into
#: status.connects with its assignment (logon diagnostics).
CONNECT_ANNOTATION = "hostpool.io/connect"
