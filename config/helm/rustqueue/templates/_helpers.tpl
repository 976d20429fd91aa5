{{/* The chart's name, or nameOverride. */}}
{{- define "rustqueue.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* <release>-<chart>, or just <release> when it already contains the chart's name. */}}
{{- define "rustqueue.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Name of the operator's Deployment, ServiceAccount, roles and bindings. */}}
{{- define "rustqueue.operator" -}}
{{- printf "%s-operator" (include "rustqueue.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "rustqueue.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/part-of: {{ include "rustqueue.name" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* The operator Pods' selector (the same name label config/manager uses). */}}
{{- define "rustqueue.operatorSelector" -}}
app.kubernetes.io/name: rustqueue-operator
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "rustqueue.image" -}}
{{- printf "%s:%s" .Values.operator.image.repository (toString .Values.operator.image.tag) -}}
{{- end -}}
