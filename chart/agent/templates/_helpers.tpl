{{/* The chart name, or nameOverride. */}}
{{- define "starling-agent.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The full name of every resource: fullnameOverride, or the release name when it already contains
the chart name, or `<release>-<chart>`.
*/}}
{{- define "starling-agent.fullname" -}}
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

{{- define "starling-agent.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels of every resource. */}}
{{- define "starling-agent.labels" -}}
helm.sh/chart: {{ include "starling-agent.chart" . }}
{{ include "starling-agent.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: agent
app.kubernetes.io/part-of: starling
{{- end }}

{{/* Labels that select the agent's pod. */}}
{{- define "starling-agent.selectorLabels" -}}
app.kubernetes.io/name: {{ include "starling-agent.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* The ServiceAccount the agent runs as. */}}
{{- define "starling-agent.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "starling-agent.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The image reference. */}}
{{- define "starling-agent.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}

{{/*
The Secret the Upstream names (addresses, token, namespaces, ca.crt): connection.existingSecret,
or `<fullname>-connection`, which the chart makes.
*/}}
{{- define "starling-agent.secretName" -}}
{{- .Values.connection.existingSecret | default (printf "%s-connection" (include "starling-agent.fullname" .)) }}
{{- end }}

{{/*
Where the agent keeps its bookkeeping on this cluster (the fence and the inventory mirrors): the
sync engine's SYSTEM_NAMESPACE, fixed in the binary.
*/}}
{{- define "starling-agent.systemNamespace" -}}
starling-system
{{- end }}

{{/* The name of the cluster-scoped objects: with the namespace, so two releases never clash. */}}
{{- define "starling-agent.clusterScopedName" -}}
{{- printf "%s-%s" .Release.Namespace (include "starling-agent.fullname" .) | trunc 253 }}
{{- end }}
