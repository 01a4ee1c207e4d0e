{{- define "mcp-gateway.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "mcp-gateway.fullname" -}}
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

{{- define "mcp-gateway.selectorLabels" -}}
app.kubernetes.io/name: {{ include "mcp-gateway.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The evaluation Redis's own: never matched by the gateway's selector. */}}
{{- define "mcp-gateway.redisSelectorLabels" -}}
app.kubernetes.io/name: {{ include "mcp-gateway.name" . }}-redis
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "mcp-gateway.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "mcp-gateway.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "mcp-gateway.keysSecret" -}}
{{- default (printf "%s-keys" (include "mcp-gateway.fullname" .)) .Values.existingSecret -}}
{{- end -}}

{{/* The tenants: as given, or one `default` tenant that sees every upstream. */}}
{{- define "mcp-gateway.tenants" -}}
{{- if .Values.gateway.tenants -}}
{{- toJson .Values.gateway.tenants -}}
{{- else -}}
{{- toJson (dict "default" (dict "upstreams" (keys .Values.gateway.upstreams | sortAlpha))) -}}
{{- end -}}
{{- end -}}

{{/* The store's URL: as given, or the release's own Redis when it runs one. */}}
{{- define "mcp-gateway.storeUrl" -}}
{{- if .Values.store.redis.enabled -}}
{{- printf "redis://%s-redis:6379/0" (include "mcp-gateway.fullname" .) -}}
{{- else -}}
{{- .Values.store.url -}}
{{- end -}}
{{- end -}}

{{/* The gateway's config file. */}}
{{- define "mcp-gateway.config" -}}
gateway:
  id: {{ .Values.gateway.id | quote }}
  listen: 0.0.0.0:8080
  admin_listen: 0.0.0.0:9090
  shutdown_timeout_ms: {{ .Values.gateway.shutdownTimeoutMs }}
  {{- if .Values.adminToken.enabled }}
  # /metrics and /readyz's detail need it; the kubelet's probes read the status only.
  admin_token: "file:../keys/admin.token"
  {{- end }}
  {{- if .Values.sessionSecret.enabled }}
  # Seals session ids: every replica reads the same Secret, so any serves a session.
  session_secret: "file:../keys/session.secret"
  {{- end }}
  {{- with .Values.gateway.allowedOrigins }}
  allowed_origins: {{ toJson . }}
  {{- end }}
  tool_name_budget: {{ .Values.gateway.toolNameBudget }}
  {{- $pinned := false }}
  {{- range $name, $u := .Values.gateway.upstreams }}
  {{- if $u.pin }}{{ $pinned = true }}{{ end }}
  {{- end }}
  {{- if or .Values.gateway.pinsFile $pinned }}
  # Pinned tools' fingerprints: with a store, shared by every replica through it.
  pins_file: {{ default "/tmp/pins.json" .Values.gateway.pinsFile | quote }}
  {{- end }}
  {{- with .Values.gateway.limits }}
  limits:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.gateway.auth }}
  auth:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.gateway.upstreamAuth }}
  upstream_auth:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with include "mcp-gateway.storeUrl" . }}
  # Limits and sessions shared by every replica.
  store:
    url: {{ . | quote }}
    key_prefix: {{ $.Values.store.keyPrefix | quote }}
    when_down: {{ $.Values.store.whenDown }}
    timeout_ms: {{ $.Values.store.timeoutMs }}
    {{- if $.Values.store.existingSecret }}
    username: "env:MCP_GATEWAY_STORE_USERNAME"
    password: "env:MCP_GATEWAY_STORE_PASSWORD"
    {{- end }}
  {{- end }}
upstreams:
  {{- if .Values.gateway.upstreams }}
  {{- toYaml .Values.gateway.upstreams | nindent 2 }}
  {{- else }} {}
  {{- end }}
tenants:
  {{- $upstreams := default (dict) .Values.gateway.upstreams }}
  {{- range $name, $tenant := include "mcp-gateway.tenants" . | fromJson }}
  {{- range $u := default (list) $tenant.upstreams }}
  {{- if not (hasKey $upstreams $u) }}
  {{- fail (printf "gateway.tenants.%s.upstreams names %q, which gateway.upstreams does not define: the pod would not start" $name $u) }}
  {{- end }}
  {{- end }}
  {{ $name }}:
    api_keys: [{{ printf "file:../keys/%s" $name | quote }}]
    upstreams: {{ toJson (default (list) $tenant.upstreams) }}
    {{- /* Every other key of the file's tenants, as it is (values.schema.json names them). */}}
    {{- range $key, $value := omit $tenant "api_keys" "upstreams" }}
    {{ $key }}: {{ toJson $value }}
    {{- end }}
  {{- end }}
{{- end -}}
