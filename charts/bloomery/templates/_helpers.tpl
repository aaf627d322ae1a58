{{/*
Names. The operator's objects are named after the release (bloomery-operator-..., as in the
kustomize install, whose names are bloomery-*), so two releases in one cluster do not collide.
*/}}
{{- define "bloomery.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "bloomery.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "bloomery.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels of every object of the chart. */}}
{{- define "bloomery.labels" -}}
helm.sh/chart: {{ include "bloomery.chart" . }}
app.kubernetes.io/name: {{ include "bloomery.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/*
Selector labels of the operator's pods. The data plane's pods carry
app.kubernetes.io/component=dataplane; the operator's carry component=operator.
*/}}
{{- define "bloomery.operatorSelectorLabels" -}}
app.kubernetes.io/name: {{ include "bloomery.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end }}

{{/* The operator's selector labels as key=value pairs, the form of --operator-pod-labels. */}}
{{- define "bloomery.operatorSelector" -}}
{{- $pairs := list }}
{{- range $k, $v := include "bloomery.operatorSelectorLabels" . | fromYaml }}
{{- $pairs = append $pairs (printf "%s=%s" $k $v) }}
{{- end }}
{{- join "," $pairs }}
{{- end }}

{{- define "bloomery.operatorLabels" -}}
{{ include "bloomery.labels" . }}
app.kubernetes.io/component: operator
{{- end }}

{{- define "bloomery.operatorName" -}}
{{- printf "%s-operator" (include "bloomery.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "bloomery.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "bloomery.operatorName" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The image of both roles; the tag defaults to the chart's appVersion. */}}
{{- define "bloomery.image" -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag }}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository $tag }}
{{- end }}
{{- end }}

{{/* The image of BloomClusters that name none: the operator's own unless overridden. */}}
{{- define "bloomery.dataPlaneImage" -}}
{{- default (include "bloomery.image" .) .Values.operator.dataPlaneImage }}
{{- end }}

{{- define "bloomery.bloomClusterName" -}}
{{- default (include "bloomery.fullname" .) .Values.bloomCluster.name }}
{{- end }}
