{{- define "platform-lib.labels" -}}
app.kubernetes.io/name: {{ .name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
{{- with .root.Values.labels }}
{{ toYaml . }}
{{- end }}
{{- end -}}
