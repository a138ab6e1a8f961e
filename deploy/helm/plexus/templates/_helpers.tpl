{{/* The allocator's gRPC target: allocatorAddress, else its Service in this namespace. */}}
{{- define "plexus.allocatorAddress" -}}
{{- .Values.allocatorAddress | default (printf "plexus-allocator.%s.svc:7401" .Release.Namespace) -}}
{{- end }}
