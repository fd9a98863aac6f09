{{- define "meshwave.name" -}}meshwave{{- end -}}

{{- define "meshwave.fullname" -}}
{{- if eq .Release.Name "meshwave" -}}meshwave{{- else -}}{{ printf "%s-meshwave" .Release.Name | trunc 63 | trimSuffix "-" }}{{- end -}}
{{- end -}}

{{- define "meshwave.labels" -}}
app.kubernetes.io/name: meshwave
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "meshwave.selectorLabels" -}}
app.kubernetes.io/name: meshwave
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The agent's config file: the values, with the namespaces defaulted to the release's. */}}
{{- define "meshwave.config" -}}
{{- $cfg := deepCopy .Values.config -}}
{{- if not (hasKey $cfg "rootNamespace") -}}{{- $_ := set $cfg "rootNamespace" "istio-system" -}}{{- end -}}
{{- $_ := set $cfg "leaderElection" (include "meshwave.leaderElection" . | fromYaml) -}}
{{- $gates := default dict $cfg.gates -}}
{{- $sync := default dict $gates.sync -}}
{{- if not (hasKey $sync "tokenFile") -}}{{- $_ := set $sync "tokenFile" "/var/run/secrets/tokens/istio-token" -}}{{- end -}}
{{- $_ := set $gates "sync" $sync -}}
{{- $_ := set $cfg "gates" $gates -}}
{{- toYaml $cfg -}}
{{- end -}}

{{/*
config.leaderElection with its defaults: enabled, the release namespace and
the release's name. Each default fills only a key that is not set (sprig's
merge would take an explicit false for unset and turn it back to true).
*/}}
{{- define "meshwave.leaderElection" -}}
{{- $le := deepCopy (default dict .Values.config.leaderElection) -}}
{{- if not (hasKey $le "enabled") -}}{{- $_ := set $le "enabled" true -}}{{- end -}}
{{- if not $le.namespace -}}{{- $_ := set $le "namespace" .Release.Namespace -}}{{- end -}}
{{- if not $le.leaseName -}}{{- $_ := set $le "leaseName" (include "meshwave.fullname" .) -}}{{- end -}}
{{- toYaml $le -}}
{{- end -}}

{{/*
Without leader election every replica runs the workers, and two agents
would move the same workloads each on its own.
*/}}
{{- define "meshwave.checkLeaderElection" -}}
{{- $le := include "meshwave.leaderElection" . | fromYaml -}}
{{- if and (not $le.enabled) (gt (int .Values.replicaCount) 1) -}}
{{- fail (printf "replicaCount %d with config.leaderElection.enabled=false would run %d agents that each move workloads on their own: set replicaCount=1, or keep leader election on" (int .Values.replicaCount) (int .Values.replicaCount)) -}}
{{- end -}}
{{- end -}}

{{/* A Go-style duration ("30m", "1h", "90s") in seconds, for alert expressions. */}}
{{- define "meshwave.seconds" -}}
{{- $d := toString . -}}
{{- if hasSuffix "h" $d -}}{{ mul (trimSuffix "h" $d | int) 3600 }}
{{- else if hasSuffix "m" $d -}}{{ mul (trimSuffix "m" $d | int) 60 }}
{{- else if hasSuffix "s" $d -}}{{ trimSuffix "s" $d | int }}
{{- else -}}{{ fail (printf "prometheusRule.alerts.waveStuckAfter %q is not a whole number of s, m or h" $d) }}
{{- end -}}
{{- end -}}

{{/*
istiod answers debug requests (syncz) only from its root namespace since
Istio 1.28.7, 1.29.3 and 1.30, so the agent must run there.
*/}}
{{- define "meshwave.checkNamespace" -}}
{{- $root := .Values.config.rootNamespace | default "istio-system" -}}
{{- if and (ne .Release.Namespace $root) (not .Values.allowOutsideRootNamespace) -}}
{{- fail (printf "meshwave must run in the mesh's root namespace %q, because istiod answers its debug requests only from there: install with --namespace %s, or set allowOutsideRootNamespace=true if istiod's DEBUG_ENDPOINT_AUTH_ALLOWED_NAMESPACES lists %q" $root $root .Release.Namespace) -}}
{{- end -}}
{{- end -}}
