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
{{- if not (hasKey $cfg "rootNamespace") -}}{{- $_ := set $cfg "rootNamespace" .Release.Namespace -}}{{- end -}}
{{- $le := dict "enabled" true "namespace" .Release.Namespace "leaseName" (include "meshwave.fullname" .) -}}
{{- if hasKey $cfg "leaderElection" -}}{{- $le = merge (deepCopy $cfg.leaderElection) $le -}}{{- end -}}
{{- $_ := set $cfg "leaderElection" $le -}}
{{- $gates := default dict $cfg.gates -}}
{{- $sync := default dict $gates.sync -}}
{{- if not (hasKey $sync "tokenFile") -}}{{- $_ := set $sync "tokenFile" "/var/run/secrets/tokens/istio-token" -}}{{- end -}}
{{- $_ := set $gates "sync" $sync -}}
{{- $_ := set $cfg "gates" $gates -}}
{{- toYaml $cfg -}}
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
