{{- define "inferplex.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "inferplex.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "inferplex.instanceLabels" -}}
app.kubernetes.io/name: {{ include "inferplex.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The gateway's pods: what the Service, the Deployment and the disruption budget select (not the Job's). */}}
{{- define "inferplex.selectorLabels" -}}
{{ include "inferplex.instanceLabels" . }}
app.kubernetes.io/component: gateway
{{- end -}}

{{- define "inferplex.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{ include "inferplex.instanceLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "inferplex.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "inferplex.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "inferplex.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* The gateway's config file: values.config with the server fields the chart owns set from its values. */}}
{{- define "inferplex.config" -}}
{{- $server := deepCopy (default dict .Values.config.server) -}}
{{- $_ := set $server "host" "0.0.0.0" -}}
{{- $_ := set $server "port" (int .Values.containerPort) -}}
{{- $_ := set $server "master_key" "env:INFERPLEX_MASTER_KEY" -}}
{{- $_ := set $server "data_dir" "/var/lib/inferplex" -}}
{{- $_ := set $server "drain_delay_s" .Values.drain.delaySeconds -}}
{{- $_ := set $server "drain_s" .Values.drain.graceSeconds -}}
{{- $config := deepCopy .Values.config -}}
{{- $_ := set $config "server" $server -}}
{{- if .Values.metrics.enabled -}}
{{- $observability := default dict $config.observability -}}
{{- $metrics := default dict $observability.metrics -}}
{{- $_ := set $metrics "listen" (printf "0.0.0.0:%d" (int .Values.metrics.port)) -}}
{{- $_ := set $observability "metrics" $metrics -}}
{{- $_ := set $config "observability" $observability -}}
{{- end -}}
{{- toYaml $config -}}
{{- end -}}

{{/* A ConfigMap, or a Secret with configInSecret: the same data either way. */}}
{{- define "inferplex.configObject" -}}
{{- $ := index . 0 -}}
{{- $name := index . 1 -}}
{{- $hook := index . 2 -}}
apiVersion: v1
kind: {{ if $.Values.configInSecret }}Secret{{ else }}ConfigMap{{ end }}
metadata:
  name: {{ $name }}
  labels:
    {{- include "inferplex.labels" $ | nindent 4 }}
  {{- if $hook }}
  annotations:
    helm.sh/hook: pre-install,pre-upgrade
    helm.sh/hook-weight: "-1"
    helm.sh/hook-delete-policy: before-hook-creation,hook-succeeded
  {{- end }}
{{- if $.Values.configInSecret }}
type: Opaque
stringData:
{{- else }}
data:
{{- end }}
  config.yaml: |
    {{- include "inferplex.config" $ | nindent 4 }}
{{- end -}}

{{/* What a gateway container and the migration Job share: the image, the config and the secrets. */}}
{{- define "inferplex.env" -}}
- name: INFERPLEX_CONFIG
  value: /etc/inferplex/config.yaml
{{- range $name, $key := .Values.secret.env }}
- name: {{ $name }}
  valueFrom:
    secretKeyRef:
      name: {{ $.Values.secret.name }}
      key: {{ $key }}
{{- end }}
{{- with .Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "inferplex.configVolume" -}}
- name: config
  {{- if .root.Values.configInSecret }}
  secret:
    secretName: {{ .name }}
  {{- else }}
  configMap:
    name: {{ .name }}
  {{- end }}
{{- end -}}
