{{/* The release's base name, at most 63 characters as object names allow. */}}
{{- define "gpuchaos.fullname" -}}
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

{{- define "gpuchaos.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels every object carries. */}}
{{- define "gpuchaos.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "gpuchaos.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* Selector labels of one component (controller, agent); call with (list $ "controller"). */}}
{{- define "gpuchaos.selectorLabels" -}}
{{- $top := index . 0 -}}
app.kubernetes.io/name: {{ include "gpuchaos.name" $top }}
app.kubernetes.io/instance: {{ $top.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{- define "gpuchaos.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "gpuchaos.controller.serviceAccountName" -}}
{{- if .Values.controller.serviceAccount.create -}}
{{- default (printf "%s-controller" (include "gpuchaos.fullname" .)) .Values.controller.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.controller.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "gpuchaos.agent.serviceAccountName" -}}
{{- if .Values.agent.serviceAccount.create -}}
{{- default (printf "%s-agent" (include "gpuchaos.fullname" .)) .Values.agent.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.agent.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/*
The rules of a role generated from the markers in deploy/rbac/<role>
(files/rbac/<role>/role.yaml, written by go generate). Failing on an
empty or missing file keeps a chart from installing a role with no rules.
Call with (list $ "controller").
*/}}
{{- define "gpuchaos.generatedRules" -}}
{{- $top := index . 0 -}}
{{- $path := printf "files/rbac/%s/role.yaml" (index . 1) -}}
{{- $role := $top.Files.Get $path | fromYaml -}}
{{- if or (hasKey $role "Error") (not $role.rules) -}}
{{- fail (printf "%s: no rules (run go generate ./deploy/...)" $path) -}}
{{- end -}}
{{- toYaml $role.rules -}}
{{- end -}}
