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
{{- printf "%s-memberlist" (include "ironlb.fullname" .) -}}
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

{{- define "ironlb.image" -}}
{{- printf "%s:%s" .image.repository (default .root.Chart.AppVersion .image.tag) -}}
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
