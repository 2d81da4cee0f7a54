{{/*
The session broker (hostpool-broker): names and namespaces shared by its Role (roles.yaml) and
its workload (broker.yaml, broker-networkpolicy.yaml).
*/}}

{{/* The broker's Role and --namespace: broker.namespace, else watchNamespace, else the
release namespace. */}}
{{- define "hostpool-operator.broker.namespace" -}}
{{- .Values.broker.namespace | default .Values.watchNamespace | default .Release.Namespace }}
{{- end }}

{{- define "hostpool-operator.broker.serviceAccountName" -}}
{{- .Values.broker.serviceAccount.name | default (printf "%s-broker" (include "hostpool-operator.fullname" .)) }}
{{- end }}

{{- define "hostpool-operator.broker.serviceAccountNamespace" -}}
{{- .Values.broker.serviceAccount.namespace | default .Release.Namespace }}
{{- end }}

{{/* The Role, RoleBinding (and ServiceAccount) are rendered for broker.create, and for
broker.enabled: the broker cannot run without them. */}}
{{- define "hostpool-operator.broker.rbac" -}}
{{- if or .Values.broker.create .Values.broker.enabled }}true{{ end }}
{{- end }}

{{/*
The broker pods' labels. Not the operator's selector labels: the operator's Deployment and its
metrics Service select app.kubernetes.io/name=<name> + instance, and would take broker pods
for theirs. So the broker's pods are app.kubernetes.io/name=<name>-broker.
*/}}
{{- define "hostpool-operator.broker.selectorLabels" -}}
app.kubernetes.io/name: {{ printf "%s-broker" (include "hostpool-operator.name" .) | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: broker
{{- end }}

{{- define "hostpool-operator.broker.labels" -}}
helm.sh/chart: {{ include "hostpool-operator.chart" . }}
{{ include "hostpool-operator.broker.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: hostpool-operator
{{- end }}

{{/* The container port's (and the Service port's) name: https with broker.tls.secretName,
else http. */}}
{{- define "hostpool-operator.broker.portName" -}}
{{- if .Values.broker.tls.secretName }}https{{ else }}http{{ end }}
{{- end }}

{{/* Where the OIDC CA and the TLS key pair are mounted. */}}
{{- define "hostpool-operator.broker.caDir" -}}/etc/hostpool-broker/oidc-ca{{- end }}
{{- define "hostpool-operator.broker.tlsDir" -}}/etc/hostpool-broker/tls{{- end }}
{{/* The portal's two secrets (one projected volume) and the image's browser RDP client. */}}
{{- define "hostpool-operator.broker.portalDir" -}}/etc/hostpool-broker/portal{{- end }}
{{- define "hostpool-operator.broker.webClientDir" -}}/usr/share/hostpool-operator/web-client{{- end }}
{{- define "hostpool-operator.broker.logonKeyDir" -}}/etc/hostpool-broker/logon-key{{- end }}

{{/* Single sign-on: the Secret with the broker's logon key, and the ConfigMap its public
half is published in. */}}
{{- define "hostpool-operator.broker.logonKeySecret" -}}
{{- .Values.broker.singleSignOn.keySecret.secretName | default (printf "%s-logon-key" (include "hostpool-operator.fullname" .)) }}
{{- end }}
{{- define "hostpool-operator.broker.logonKeysConfigMap" -}}
{{- .Values.broker.singleSignOn.publicKeysConfigMap | default "hostpool-logon-keys" }}
{{- end }}

{{/* The portal's public URL: broker.portal.publicURL, else the Ingress's host (https with
the Ingress's TLS Secret, else http); empty when neither is set. */}}
{{- define "hostpool-operator.broker.publicURL" -}}
{{- $b := .Values.broker }}
{{- if $b.portal.publicURL }}
{{- trimSuffix "/" $b.portal.publicURL }}
{{- else if and $b.ingress.enabled $b.ingress.host }}
{{- printf "%s://%s" (ternary "https" "http" (not (empty $b.ingress.tls.secretName))) $b.ingress.host }}
{{- end }}
{{- end }}

{{/* Refuses values the broker cannot run with (only when broker.enabled). */}}
{{- define "hostpool-operator.broker.validate" -}}
{{- $b := .Values.broker }}
{{- $_ := required "broker.oidc.issuer is required when broker.enabled is true: the OIDC issuer URL whose tokens the broker accepts (--oidc-issuer)" $b.oidc.issuer }}
{{- if and (hasPrefix "http://" $b.oidc.issuer) (not $b.oidc.allowInsecureIssuer) }}
{{- fail "broker.oidc.issuer is plain http: the broker would check tokens with keys fetched without TLS; use https (set broker.oidc.allowInsecureIssuer=true only for a test issuer)" }}
{{- end }}
{{- $_ := required "broker.oidc.audience is required when broker.enabled is true: the OIDC client ID the tokens must be issued for (--oidc-audience)" $b.oidc.audience }}
{{- if and $b.oidc.caConfigMap.name $b.oidc.caSecret.name }}
{{- fail "broker.oidc.caConfigMap and broker.oidc.caSecret: set one of them, not both (the broker takes one --oidc-ca-file)" }}
{{- end }}
{{- if $b.ingress.enabled }}
{{- $_ := required "broker.ingress.host is required when broker.ingress.enabled is true: the host name the Ingress routes to the broker" $b.ingress.host }}
{{- end }}
{{- if $b.portal.enabled }}
{{- $_ := required "broker.portal.clientId is required when broker.portal.enabled is true: the portal's confidential client at the issuer (--portal-client-id)" $b.portal.clientId }}
{{- $_ := required "broker.portal.clientSecret.secretName is required when broker.portal.enabled is true: the Secret holding the portal client's secret (--portal-client-secret-file)" $b.portal.clientSecret.secretName }}
{{- $_ := required "broker.portal.cookieSecret.secretName is required when broker.portal.enabled is true: the Secret holding the key that seals the session cookies (--cookie-secret-file)" $b.portal.cookieSecret.secretName }}
{{- $url := include "hostpool-operator.broker.publicURL" . }}
{{- if not $url }}
{{- fail "broker.portal.publicURL is required when broker.portal.enabled is true and there is no broker.ingress.host: the address people open (--public-url; the redirect URI is <publicURL>/auth/callback)" }}
{{- end }}
{{- if and (hasPrefix "http://" $url) (not $b.portal.allowInsecurePublicURL) }}
{{- fail (printf "the portal's public URL %s is plain http: session cookies and desktop passwords would cross the network unencrypted; use https (set broker.portal.allowInsecurePublicURL=true only for a test cluster)" $url) }}
{{- end }}
{{- end }}
{{- $saNamespace := include "hostpool-operator.broker.serviceAccountNamespace" . }}
{{- if ne $saNamespace .Release.Namespace }}
{{- fail (printf "broker.enabled: the broker runs in the release namespace %s, so its ServiceAccount must be there too (broker.serviceAccount.namespace is %s)" .Release.Namespace $saNamespace) }}
{{- end }}
{{- end }}
