{{/* The chart's name, shortened to a DNS label. */}}
{{- define "hostpool-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The release's full name: <release>-<chart> unless the release already contains it. */}}
{{- define "hostpool-operator.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "hostpool-operator.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "hostpool-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "hostpool-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "hostpool-operator.labels" -}}
helm.sh/chart: {{ include "hostpool-operator.chart" . }}
{{ include "hostpool-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: hostpool-operator
{{- end }}

{{- define "hostpool-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "hostpool-operator.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "hostpool-operator.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/*
The rules the operator needs, and nothing else (proven by tests/e2e/test_rbac_live.py):
- the four kinds: list + watch (the operator's informers: a LIST, then a watch);
- sessionrequests: get (re-read a request after a conflicting status write);
- sessionrequests: delete (a ScalingPlan with stopHostsWhen ZeroActiveSessions deletes the
  Disconnected requests of a host it drained, before deleting the host);
- sessionhosts: create + delete (scaling adds hosts from the pool's hostTemplate and removes
  only those it created);
- sessionhosts: patch (a ScalingPlan drains and undrains hosts the operator created:
  spec.drainMode, and an annotation that marks the drain as the plan's) and get (a personal
  pool's host is given to its user, spec.assignedUser, only onto the version just read);
- the status subresources: patch (pool, host, plan and pending-request status are merge
  patches);
  sessionrequests/status also update (an assignment replaces the request's status in one PUT,
  conditional on its resourceVersion: cheaper for the API server than a patch);
- hostpools/finalizers: update (hosts it creates carry an ownerReference with
  blockOwnerDeletion: true; clusters with the OwnerReferencesPermissionEnforcement admission
  plugin, e.g. OpenShift, require this permission on the owner for that);
- core events: create (Events on pools, hosts and requests; never read back);
- one rule per entry of .Values.workloadResources: get, list, watch, create, delete (an
  informer per workload kind; a pool's hostTemplate.workload creates one workload per host,
  and a terminally failed workload the operator created is deleted and created again);
- with any workload resource, sessionhosts/finalizers: update (each workload it creates is
  controlled by its SessionHost with blockOwnerDeletion: true; see hostpools/finalizers),
  and persistentvolumeclaims: get, list, create, delete (a hostTemplate's
  volumeClaimTemplates: one claim per host, controlled by the host; a personal host's claims
  listed by its label and deleted, those the host controls only, when the host is taken from
  its user: that user's files never reach another).
API discovery (/api/v1, /apis/<group>/<version>) needs no rule: the default
system:discovery ClusterRole allows it to every authenticated identity.
*/}}
{{- define "hostpool-operator.rules" -}}
- apiGroups: ["hostpool.io"]
  resources: ["hostpools"]
  verbs: ["list", "watch"]
- apiGroups: ["hostpool.io"]
  resources: ["sessionhosts"]
  verbs: ["get", "list", "watch", "create", "delete", "patch"]
- apiGroups: ["hostpool.io"]
  resources: ["sessionrequests"]
  verbs: ["get", "list", "watch", "delete"]
- apiGroups: ["hostpool.io"]
  resources: ["scalingplans"]
  verbs: ["list", "watch"]
- apiGroups: ["hostpool.io"]
  resources: ["hostpools/status", "sessionhosts/status", "scalingplans/status"]
  verbs: ["patch"]
- apiGroups: ["hostpool.io"]
  resources: ["sessionrequests/status"]
  verbs: ["patch", "update"]
- apiGroups: ["hostpool.io"]
  resources: ["hostpools/finalizers"]
  verbs: ["update"]
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create"]
- apiGroups: ["apps"]
  resources: ["controllerrevisions"]
  verbs: ["list", "create", "delete"]
{{- if .Values.workloadResources }}
- apiGroups: ["hostpool.io"]
  resources: ["sessionhosts/finalizers"]
  verbs: ["update"]
- apiGroups: [""]
  resources: ["persistentvolumeclaims"]
  verbs: ["get", "list", "create", "delete"]
{{- end }}
{{- range .Values.workloadResources }}
- apiGroups: [{{ .apiGroup | toJson }}]
  resources: {{ .resources | toJson }}
  verbs: ["get", "list", "watch", "create", "delete"]
{{- end }}
{{- end }}
