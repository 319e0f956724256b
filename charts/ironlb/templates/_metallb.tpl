{{- /*
MetalLB's chart keys that this chart accepts, so that `helm install -f <MetalLB's values file>`
works, without honouring them (values.schema.json says what becomes of each). Two kinds:

- "ironlb.metallb.refuse" fails the install on a setting that asks for what ironlb cannot do and
  the user would otherwise silently not get: TLS that ironlb does not serve, an frr-k8s it does
  not drive, layer 2 or membership behaviour it does not have. templates/metallb-values.yaml
  calls it, so every render checks.
- "ironlb.metallb.notes" lists, one line each, settings that are harmless to leave unused (the
  FRR containers and frr-k8s, when ironlb speaks BGP itself; a separate health port; ...).
  NOTES.txt prints them.

These keys are not in values.yaml, so they are read with `index` and `dig`, which tolerate their
absence.
*/ -}}

{{- define "ironlb.metallb.refuse" -}}
{{- $v := .Values }}
{{- $c := $v.controller }}
{{- $s := $v.speaker }}
{{- $frrk8s := index $v "frrk8s" | default dict }}
{{- $tls := index $v "tls" | default dict }}
{{- $refused := list }}
{{- if dig "external" false $frrk8s }}
{{- $refused = append $refused "frrk8s.external: true: ironlb drives no frr-k8s; its speaker speaks BGP itself with ExaBGP, to the BGPPeers that select its node. Remove the key." }}
{{- end }}
{{- with dig "secureMetricsPort" nil $v.prometheus }}
{{- $refused = append $refused (printf "prometheus.secureMetricsPort: %v: ironlb serves /metrics over plain HTTP only (no TLS, no kube-rbac-proxy). Remove the key; limit who reaches prometheus.metricsPort instead (networkpolicies covers the controller)." .) }}
{{- end }}
{{- range $key := list "controllerMetricsTLSSecret" "speakerMetricsTLSSecret" }}
{{- with dig $key "" $tls }}
{{- $refused = append $refused (printf "tls.%s: %s: ironlb serves /metrics over plain HTTP only, so the certificate would not be used. Remove the key." $key .) }}
{{- end }}
{{- end }}
{{- range $key, $value := dict "tls.minVersion" (dig "minVersion" "" $tls) "controller.tlsMinVersion" (dig "tlsMinVersion" "" $c) }}
{{- if and $value (ne (toString $value) "VersionTLS12") }}
{{- $refused = append $refused (printf "%s: %v: ironlb's webhook accepts TLS 1.2 and later and has no setting to raise that. Remove the key or set VersionTLS12." $key $value) }}
{{- end }}
{{- end }}
{{- range $key, $value := dict "tls.cipherSuites" (dig "cipherSuites" "" $tls) "tls.curvePreferences" (dig "curvePreferences" "" $tls) "controller.tlsCipherSuites" (dig "tlsCipherSuites" "" $c) }}
{{- if $value }}
{{- $refused = append $refused (printf "%s: %v: ironlb's webhook uses OpenSSL's default cipher suites and curves and has no setting for them. Remove the key." $key $value) }}
{{- end }}
{{- end }}
{{- $hostNetwork := dig "hostNetwork" true $s }}
{{- if and (kindIs "bool" $hostNetwork) (not $hostNetwork) }}
{{- $refused = append $refused "speaker.hostNetwork: false: ironlb's speaker answers ARP/NDP and speaks BGP on the node's own interfaces, so it always uses the host network. Remove the key." }}
{{- end }}
{{- if dig "wanConfig" false $s }}
{{- $refused = append $refused "speaker.wanConfig: true: ironlb's membership has LAN timings only; across a WAN it would take slow links for dead nodes. Remove the key." }}
{{- end }}
{{- with $refused }}
{{- fail (printf "MetalLB values that ironlb cannot honour:\n  * %s" (join "\n  * " .)) }}
{{- end }}
{{- end -}}

{{- define "ironlb.metallb.notes" -}}
{{- $v := .Values }}
{{- $s := $v.speaker }}
{{- $prom := $v.prometheus }}
{{- $frrk8s := index $v "frrk8s" | default dict }}
{{- $notes := list }}
{{- if dig "frr" "enabled" false $s }}
{{- $notes = append $notes "speaker.frr.enabled: ironlb's speaker speaks BGP and BFD itself with ExaBGP, so no FRR container runs: speaker.frr.*, speaker.reloader, speaker.frrMetrics, speaker.initContainers and speaker.startupProbe are not used." }}
{{- end }}
{{- if dig "enabled" false $frrk8s }}
{{- $notes = append $notes "frrk8s.enabled: frr-k8s is not installed: ironlb's speaker speaks BGP itself with ExaBGP and reads no FRRConfiguration; frrk8s.* and frr-k8s.* are not used." }}
{{- else if index $v "frr-k8s" }}
{{- $notes = append $notes "frr-k8s: values of MetalLB's frr-k8s subchart; not used (ironlb installs no frr-k8s)." }}
{{- end }}
{{- if not (kindIs "invalid" (dig "bgpDebounceTimeout" nil $s)) }}
{{- $notes = append $notes "speaker.bgpDebounceTimeout: not used: it paces FRR's configuration reloads, and ExaBGP takes each route change as it comes." }}
{{- end }}
{{- if not (dig "enabled" true $v.crds) }}
{{- $notes = append $notes "crds.enabled: false: the metallb.io CRDs are in the chart's crds/ directory, which Helm installs when they are missing and never changes; to leave them out, install with --skip-crds." }}
{{- end }}
{{- $probeKeys := list }}
{{- $probePorts := list }}
{{- range $component := list "controller" "speaker" }}
{{- range $probe := list "livenessProbe" "readinessProbe" }}
{{- with dig "port" nil (index $v $component $probe | default dict) }}
{{- $probeKeys = append $probeKeys (printf "%s.%s.port" $component $probe) }}
{{- $probePorts = append $probePorts (toString .) }}
{{- end }}
{{- end }}
{{- end }}
{{- with $probeKeys }}
{{- $notes = append $notes (printf "%s (%s): not used: ironlb serves /healthz and /readyz on prometheus.metricsPort (%v), where the probes go." (join ", " .) (join ", " (uniq $probePorts)) $prom.metricsPort) }}
{{- end }}
{{- $plain := list }}
{{- if hasKey $v "tls" }}
{{- $plain = append $plain "tls.*" }}
{{- end }}
{{- if $prom.serviceMonitor.enabled }}
{{- range $component := list "speaker" "controller" }}
{{- if dig $component "tlsConfig" nil $prom.serviceMonitor }}
{{- $plain = append $plain (printf "prometheus.serviceMonitor.%s.tlsConfig" $component) }}
{{- end }}
{{- end }}
{{- end }}
{{- if and $prom.podMonitor.enabled (dig "tlsConfig" nil $prom.podMonitor) }}
{{- $plain = append $plain "prometheus.podMonitor.tlsConfig" }}
{{- end }}
{{- with $plain }}
{{- $notes = append $notes (printf "%s: not used: ironlb serves /metrics over plain HTTP, without authentication, on prometheus.metricsPort (%v), and its monitors scrape it so; its webhook takes TLS 1.2 and later." (join ", " .) $prom.metricsPort) }}
{{- end }}
{{- range $component := list "controller" "speaker" }}
{{- $values := index $v $component }}
{{- if $values.enabled }}
{{- $image := dict "image" $values.image "component" $component "root" $ }}
{{- if include "ironlb.metallbImage" $image }}
{{- $notes = append $notes (printf "%s.image.repository: %s is MetalLB's image; %s runs instead (name an ironlb image to choose another)." $component $values.image.repository (include "ironlb.image" $image)) }}
{{- end }}
{{- if dig "command" "" $values }}
{{- $notes = append $notes (printf "%s.command: not used: ironlb's image has its own entry point." $component) }}
{{- end }}
{{- end }}
{{- end }}
{{- range $notes }}
  * {{ . }}
{{- end }}
{{- end -}}
