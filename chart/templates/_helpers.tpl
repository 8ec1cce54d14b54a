{{/* The chart name, or nameOverride. */}}
{{- define "starling.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The full name of every resource: fullnameOverride, or the release name when it already contains
the chart name, or `<release>-<chart>`. Kept to 52 characters so that the pod names
(`<fullname>-N`) and the headless Service name stay valid DNS labels.
*/}}
{{- define "starling.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 52 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* The headless Service that gives every replica its stable DNS name. */}}
{{- define "starling.headlessName" -}}
{{- printf "%s-headless" (include "starling.fullname" .) }}
{{- end }}

{{/* The DNS suffix shared by every replica: `<headless>.<namespace>.svc.<clusterDomain>`. */}}
{{- define "starling.peerDomain" -}}
{{- printf "%s.%s.svc.%s" (include "starling.headlessName" .) .Release.Namespace .Values.clusterDomain }}
{{- end }}

{{/*
`--peers`: every replica's stable name and gRPC port. Pod ordinals start at 1 (the node ids).
*/}}
{{- define "starling.peers" -}}
{{- $peers := list }}
{{- range $index := until (int .Values.replicaCount) }}
{{- $peers = append $peers (printf "%s-%d.%s:%d" (include "starling.fullname" $) (add1 $index) (include "starling.peerDomain" $) (int $.Values.ports.grpc)) }}
{{- end }}
{{- join "," $peers }}
{{- end }}

{{/*
The Secret with the gRPC port's certificate (`tls.crt`, `tls.key`, `ca.crt`), mounted by every
replica: tls.secretName, or `<fullname>-tls`.
*/}}
{{- define "starling.tlsSecretName" -}}
{{- .Values.tls.secretName | default (printf "%s-tls" (include "starling.fullname" .)) }}
{{- end }}

{{/*
Whether cert-manager issues the certificate: `tls.certManager.enabled` true, or `auto` (the
default) on a cluster that serves cert-manager.io/v1. Empty when it does not.
*/}}
{{- define "starling.certManager" -}}
{{- $enabled := .Values.tls.certManager.enabled }}
{{- if or (eq (toString $enabled) "true") (and (eq (toString $enabled) "auto") (.Capabilities.APIVersions.Has "cert-manager.io/v1")) -}}
true
{{- end }}
{{- end }}

{{/*
Whether the chart generates the certificate itself (no cert-manager, no Secret named by the
user): a CA and a certificate made at install and kept across upgrades. Empty when it does not.
*/}}
{{- define "starling.generatedTls" -}}
{{- if and (not (include "starling.certManager" .)) (not .Values.tls.secretName) -}}
true
{{- end }}
{{- end }}

{{/* The DNS names of the replicas' certificate: the peers (wildcard), the API Service, loopback. */}}
{{- define "starling.tlsDnsNames" -}}
{{- $service := include "starling.fullname" . }}
{{- $names := list (printf "*.%s" (include "starling.peerDomain" .)) $service (printf "%s.%s" $service .Release.Namespace) (printf "%s.%s.svc" $service .Release.Namespace) (printf "%s.%s.svc.%s" $service .Release.Namespace .Values.clusterDomain) "localhost" }}
{{- concat $names .Values.tls.certManager.extraDnsNames | toJson }}
{{- end }}

{{/* The IP addresses of the replicas' certificate. */}}
{{- define "starling.tlsIpAddresses" -}}
{{- concat (list "127.0.0.1" "::1") .Values.tls.certManager.extraIpAddresses | toJson }}
{{- end }}

{{- define "starling.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels of every resource. */}}
{{- define "starling.labels" -}}
helm.sh/chart: {{ include "starling.chart" . }}
{{ include "starling.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: starling
{{- end }}

{{/* Labels that select the replicas' pods. */}}
{{- define "starling.selectorLabels" -}}
app.kubernetes.io/name: {{ include "starling.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* The ServiceAccount the replicas run as. */}}
{{- define "starling.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "starling.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The image reference. */}}
{{- define "starling.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}

{{/* The RBAC rules: exactly what the replicas use, no wildcards. Secrets are read-only. */}}
{{- define "starling.rbacRules" -}}
- apiGroups: ["starling.dev"]
  resources: ["sources", "syncs", "providers", "alerts"]
  verbs: ["get", "list", "watch"]
- apiGroups: ["starling.dev"]
  resources: ["clusters", "syncgroups"]
  verbs: ["get", "list", "watch", "patch"]
- apiGroups: ["starling.dev"]
  resources: ["sources/status", "clusters/status", "syncs/status", "syncgroups/status", "providers/status", "alerts/status"]
  verbs: ["get", "update", "patch"]
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["get", "list", "watch"]
- apiGroups: ["", "events.k8s.io"]
  resources: ["events"]
  verbs: ["create", "patch"]
{{- if and (eq .Values.mode "operator") .Values.operator.capi }}
- apiGroups: ["cluster.x-k8s.io"]
  resources: ["clusters"]
  verbs: ["get", "list", "watch"]
{{- end }}
{{- end }}

{{/*
The namespaces operator mode watches, comma-separated: rbac.watchNamespaces, or the release's
namespace with rbac.namespaced; empty (every namespace) otherwise. The same as the RBAC grants.
*/}}
{{- define "starling.watchNamespaces" -}}
{{- if .Values.rbac.watchNamespaces -}}
{{- join "," .Values.rbac.watchNamespaces -}}
{{- else if .Values.rbac.namespaced -}}
{{- .Release.Namespace -}}
{{- end -}}
{{- end }}
