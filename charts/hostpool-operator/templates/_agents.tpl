{{/*
Host agents (hostpool-agent): their identities, RBAC and the ValidatingAdmissionPolicy that
binds each identity to one host. See docs/install.md, "Host agents: identity and least
privilege".
*/}}

{{/* The namespaces agents work in, as JSON: agents.namespaces, else watchNamespace, else
the release namespace. */}}
{{- define "hostpool-operator.agentNamespaces" -}}
{{- $namespaces := .Values.agents.namespaces }}
{{- if not $namespaces }}
{{- $namespaces = list (default .Release.Namespace .Values.watchNamespace) }}
{{- end }}
{{- toJson $namespaces }}
{{- end }}

{{/* The shared ServiceAccount of pod sidecars; per-host ServiceAccounts are its name, a dash
and the host's name. */}}
{{- define "hostpool-operator.agentPrefix" -}}
{{- printf "%s-" .Values.agents.serviceAccountName }}
{{- end }}

{{/* agents.hosts as JSON: [{"name": host, "namespace": ns, "serviceAccount": sa}], each
entry checked. A string entry is a host in the only agent namespace. */}}
{{- define "hostpool-operator.agentHosts" -}}
{{- $namespaces := include "hostpool-operator.agentNamespaces" . | fromJsonArray }}
{{- $prefix := include "hostpool-operator.agentPrefix" . }}
{{- $hosts := list }}
{{- $seen := dict }}
{{- range .Values.agents.hosts }}
{{- $host := kindIs "string" . | ternary (dict "name" .) (deepCopy .) }}
{{- if not (hasKey $host "namespace") }}
{{- if ne (len $namespaces) 1 }}
{{- fail (printf "agents.hosts: host %s needs a namespace: agents.namespaces has %d entries" $host.name (len $namespaces)) }}
{{- end }}
{{- $_ := set $host "namespace" (first $namespaces) }}
{{- end }}
{{- if not (has $host.namespace $namespaces) }}
{{- fail (printf "agents.hosts: host %s is in namespace %s, which is not in agents.namespaces %v" $host.name $host.namespace $namespaces) }}
{{- end }}
{{- $sa := printf "%s%s" $prefix $host.name }}
{{- if gt (len $sa) 253 }}
{{- fail (printf "agents.hosts: ServiceAccount name %s is longer than 253 characters" $sa) }}
{{- end }}
{{- $key := printf "%s/%s" $host.namespace $host.name }}
{{- if hasKey $seen $key }}
{{- fail (printf "agents.hosts: host %s is listed twice" $key) }}
{{- end }}
{{- $_ := set $seen $key true }}
{{- $_ := set $host "serviceAccount" $sa }}
{{- $hosts = append $hosts $host }}
{{- end }}
{{- toJson $hosts }}
{{- end }}

{{/*
The agent's calls, and nothing else:
- sessionhosts, sessionrequests: get, list, watch (its host, the requests assigned to it);
- sessionhosts/status, sessionrequests/status: patch (merge patches of status.metrics and
  status.agent of its host, status.sessionState of its requests), and get: nothing the
  object itself does not show, but `kubectl patch --subresource status` reads the
  subresource first, and that is how an administrator checks an agent's token by hand;
- sessionrequests: delete (a user logged off, or a forced logoff carried out);
- core events: create (Warning Events on its host).
Which objects and which fields is the admission policy's business (agent-policy.yaml).
*/}}
{{- define "hostpool-operator.agentRules" -}}
- apiGroups: ["hostpool.io"]
  resources: ["sessionhosts", "sessionrequests"]
  verbs: ["get", "list", "watch"]
- apiGroups: ["hostpool.io"]
  resources: ["sessionhosts/status", "sessionrequests/status"]
  verbs: ["get", "patch"]
- apiGroups: ["hostpool.io"]
  resources: ["sessionrequests"]
  verbs: ["delete"]
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create"]
{{- end }}

{{/*
A CEL expression that is true when every field of `status` of a kind other than those in
.writable is the same in `object` and `oldObject` (present in both with equal values, or
absent from both). The fields are read from the kind's CRD in files/crds, every version, so
a status field added to the CRD is protected without touching this chart.
Arguments: .root (the chart's context), .plural, .writable (a list of field names).
*/}}
{{- define "hostpool-operator.agentUnchangedStatus" -}}
{{- include "hostpool-operator.unchangedFields" (merge (dict "section" "status") .) }}
{{- end }}

{{/*
The same for any top-level section of the kind's schema (.section: "status" or "spec").
*/}}
{{- define "hostpool-operator.unchangedFields" -}}
{{- $crd := .root.Files.Get (printf "files/crds/hostpool.io_%s.yaml" .plural) | fromYaml }}
{{- if not $crd.spec }}
{{- fail (printf "files/crds/hostpool.io_%s.yaml: no CRD" .plural) }}
{{- end }}
{{- $section := .section }}
{{- $fields := dict }}
{{- range $crd.spec.versions }}
{{- range $name, $_ := ((get .schema.openAPIV3Schema.properties $section).properties) }}
{{- $_ := set $fields $name true }}
{{- end }}
{{- end }}
{{- $parts := list }}
{{- range $name := keys $fields | sortAlpha }}
{{- if not (has $name $.writable) }}
{{- $parts = append $parts (printf "object.?%s.?%s == oldObject.?%s.?%s" $section $name $section $name) }}
{{- end }}
{{- end }}
{{- if not $parts }}
{{- fail (printf "files/crds/hostpool.io_%s.yaml: no %s fields" .plural $section) }}
{{- end }}
{{- join " &&\n" $parts }}
{{- end }}
