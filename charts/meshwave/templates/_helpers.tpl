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
Since Istio 1.28.7, 1.29.3 and 1.30, istiod shows a caller from outside its
root namespace only the proxies of the caller's own namespace, unless its
DEBUG_ENDPOINT_AUTH_ALLOWED_NAMESPACES (split at commas, as istiod does)
names the caller's namespace, or ENABLE_DEBUG_ENDPOINT_AUTH is false. A
release elsewhere must say that istiod allows it, and when the cluster can
be read, every istiod Deployment of the root namespace must.
*/}}
{{- define "meshwave.checkNamespace" -}}
{{- $root := .Values.config.rootNamespace | default "istio-system" -}}
{{- $ns := .Release.Namespace -}}
{{- if ne $ns $root -}}
{{- if not (has $ns (.Values.istiod.debugEndpointAuthAllowedNamespaces | default list)) -}}
{{- fail (printf "meshwave would run in namespace %q, outside the mesh's root namespace %q, where istiod shows it only the proxies of %q and the xDS sync gate could not pass a wave: install it with --namespace %s, or set DEBUG_ENDPOINT_AUTH_ALLOWED_NAMESPACES on the istiod of every revision to list %q (with Istio's chart: --set pilot.env.DEBUG_ENDPOINT_AUTH_ALLOWED_NAMESPACES=%s) and say so with --set istiod.debugEndpointAuthAllowedNamespaces={%s}" $ns $root $ns $root $ns $ns $ns) -}}
{{- end -}}
{{- $deployments := lookup "apps/v1" "Deployment" $root "" -}}
{{- range $d := (dig "items" list $deployments) -}}
{{- if eq (dig "metadata" "labels" "app" "" $d) "istiod" -}}
{{- $env := dict -}}
{{- range $c := (dig "spec" "template" "spec" "containers" list $d) -}}
{{- if eq $c.name "discovery" -}}
{{- range $e := ($c.env | default list) -}}
{{- if hasKey $e "value" -}}{{- $_ := set $env $e.name (toString $e.value) -}}{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- $listed := get $env "DEBUG_ENDPOINT_AUTH_ALLOWED_NAMESPACES" -}}
{{- $authOff := has (lower (get $env "ENABLE_DEBUG_ENDPOINT_AUTH")) (list "false" "f" "0") -}}
{{- if not (or $authOff (has $ns (splitList "," $listed))) -}}
{{- fail (printf "istiod Deployment %s/%s does not list %q in DEBUG_ENDPOINT_AUTH_ALLOWED_NAMESPACES (it is %q), so it would show meshwave only the proxies of %q: set it there (with Istio's chart: --set pilot.env.DEBUG_ENDPOINT_AUTH_ALLOWED_NAMESPACES=%s), or install meshwave with --namespace %s" $root $d.metadata.name $ns $listed $ns $ns $root) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
