{{/*
Names. Every object is `<fullname>-<component>`; cluster-scoped ones carry the fullname too, so
two releases in two namespaces (e.g. one per loadBalancerClass) never collide.
*/}}
{{- define "ironlb.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "ironlb.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "ironlb.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "ironlb.labels" -}}
helm.sh/chart: {{ include "ironlb.chart" . }}
app.kubernetes.io/name: {{ include "ironlb.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "ironlb.selectorLabels" -}}
app.kubernetes.io/name: {{ include "ironlb.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Component labels: call with (dict "root" $ "component" "controller"). */}}
{{- define "ironlb.componentLabels" -}}
{{ include "ironlb.labels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "ironlb.componentSelector" -}}
{{ include "ironlb.selectorLabels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "ironlb.controller.serviceAccountName" -}}
{{- if .Values.controller.serviceAccount.create -}}
{{- default (printf "%s-controller" (include "ironlb.fullname" .)) .Values.controller.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.controller.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "ironlb.speaker.serviceAccountName" -}}
{{- if .Values.speaker.serviceAccount.create -}}
{{- default (printf "%s-speaker" (include "ironlb.fullname" .)) .Values.speaker.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.speaker.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "ironlb.leaseName" -}}
{{- printf "%s-controller" (include "ironlb.fullname" .) -}}
{{- end -}}

{{- define "ironlb.memberlistSecretName" -}}
{{- .Values.speaker.memberlist.existingSecret | default .Values.speaker.secretName | default (printf "%s-memberlist" (include "ironlb.fullname" .)) -}}
{{- end -}}

{{- define "ironlb.webhookServiceName" -}}
{{- printf "%s-webhook-service" (include "ironlb.fullname" .) -}}
{{- end -}}

{{- define "ironlb.webhookSecretName" -}}
{{- printf "%s-webhook-cert" (include "ironlb.fullname" .) -}}
{{- end -}}

{{- define "ironlb.webhookEnabled" -}}
{{- if and .Values.controller.enabled (eq .Values.controller.webhookMode "enabled") -}}true{{- end -}}
{{- end -}}

{{/*
A component's image: call with (dict "image" .Values.x.image "component" "x" "root" $). MetalLB's
own image (`quay.io/metallb/x` or a mirror of it, from a MetalLB values file) cannot run here, so
ironlb's default image (values.yaml's) takes its place, tag included; NOTES.txt says so.
*/}}
{{- define "ironlb.image" -}}
{{- if include "ironlb.metallbImage" . -}}
{{- printf "ironlb/%s:%s" .component .root.Chart.AppVersion -}}
{{- else -}}
{{- printf "%s:%s" .image.repository (default .root.Chart.AppVersion .image.tag) -}}
{{- end -}}
{{- end -}}

{{- define "ironlb.metallbImage" -}}
{{- if regexMatch "(^|/)metallb/(controller|speaker)$" .image.repository -}}true{{- end -}}
{{- end -}}

{{/*
Container resources: call with the values' map. Helm merges a values file's `resources` into
ours, so a limit set there (MetalLB's example: `limits: {memory: 100Mi}`) can meet our default
request above it, which the apiserver refuses; such a request is lowered to the limit, which is
what Kubernetes makes of a request left unset.
*/}}
{{- define "ironlb.resources" -}}
{{- $out := deepCopy . -}}
{{- $requests := index $out "requests" | default dict -}}
{{- $limits := index $out "limits" | default dict -}}
{{- range $name := list "cpu" "memory" -}}
{{- $request := include "ironlb.quantity" (index $requests $name) -}}
{{- $limit := include "ironlb.quantity" (index $limits $name) -}}
{{- if and $request $limit (gt (float64 $request) (float64 $limit)) -}}
{{- $_ := set $requests $name (index $limits $name) -}}
{{- end -}}
{{- end -}}
{{- toYaml $out -}}
{{- end -}}

{{/* A resource quantity (`100m`, `128Mi`, `1`) as a number; empty when absent or not plain. */}}
{{- define "ironlb.quantity" -}}
{{- if not (kindIs "invalid" .) -}}
{{- $q := toString . -}}
{{- $number := regexFind "^[0-9]+([.][0-9]+)?" $q -}}
{{- $suffix := trimPrefix $number $q -}}
{{- $factors := dict "" 1 "m" 0.001 "k" 1e3 "M" 1e6 "G" 1e9 "T" 1e12 "Ki" 1024 "Mi" 1048576 "Gi" 1073741824 "Ti" 1099511627776 -}}
{{- if and $number (hasKey $factors $suffix) -}}
{{- mulf (float64 $number) (index $factors $suffix) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* A probe from values: call with (dict "probe" .Values.x.livenessProbe "path" "/healthz"). */}}
{{- define "ironlb.probe" -}}
httpGet:
  path: {{ .path }}
  port: monitoring
failureThreshold: {{ .probe.failureThreshold }}
initialDelaySeconds: {{ .probe.initialDelaySeconds }}
periodSeconds: {{ .probe.periodSeconds }}
successThreshold: {{ .probe.successThreshold }}
timeoutSeconds: {{ .probe.timeoutSeconds }}
{{- end -}}

{{- define "ironlb.scrapeAnnotations" -}}
{{- if .Values.prometheus.scrapeAnnotations }}
prometheus.io/scrape: "true"
prometheus.io/port: {{ .Values.prometheus.metricsPort | quote }}
{{- end -}}
{{- end -}}
