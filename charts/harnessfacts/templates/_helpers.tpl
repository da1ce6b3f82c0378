{{/* Names, labels and images shared by the templates. */}}

{{- define "harnessfacts.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
fullname prefixes every object: the release name, plus the chart name when
the release name does not already contain it. Cluster-scoped objects carry it
too, so two releases (in two namespaces) do not collide.
*/}}
{{- define "harnessfacts.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "harnessfacts.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "harnessfacts.labels" -}}
helm.sh/chart: {{ include "harnessfacts.chart" . }}
app.kubernetes.io/name: {{ include "harnessfacts.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: harnessfacts
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* selectorLabels: call with (dict "ctx" $ "component" "controller"). */}}
{{- define "harnessfacts.selectorLabels" -}}
app.kubernetes.io/name: {{ include "harnessfacts.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/* componentLabels: labels plus the component. */}}
{{- define "harnessfacts.componentLabels" -}}
{{ include "harnessfacts.labels" .ctx }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "harnessfacts.controllerServiceAccountName" -}}
{{- if .Values.controller.serviceAccount.create }}
{{- default (printf "%s-controller" (include "harnessfacts.fullname" .)) .Values.controller.serviceAccount.name }}
{{- else }}
{{- required "controller.serviceAccount.name is required when controller.serviceAccount.create is false" .Values.controller.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "harnessfacts.nodeAgentServiceAccountName" -}}
{{- if .Values.nodeAgent.serviceAccount.create }}
{{- default (printf "%s-node-agent" (include "harnessfacts.fullname" .)) .Values.nodeAgent.serviceAccount.name }}
{{- else }}
{{- required "nodeAgent.serviceAccount.name is required when nodeAgent.serviceAccount.create is false" .Values.nodeAgent.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* image: call with (dict "image" .Values.x.image "ctx" $). A digest wins over a tag. */}}
{{- define "harnessfacts.image" -}}
{{- if .image.digest }}
{{- printf "%s@%s" .image.repository .image.digest }}
{{- else }}
{{- printf "%s:%s" .image.repository (default .ctx.Chart.AppVersion .image.tag) }}
{{- end }}
{{- end }}

{{/* args: call with (dict "args" list "extra" list "ctx" $): each rendered with tpl. */}}
{{- define "harnessfacts.args" -}}
{{- range .args }}
- {{ tpl . $.ctx | quote }}
{{- end }}
{{- range .extra }}
- {{ tpl . $.ctx | quote }}
{{- end }}
{{- end }}

{{/* runSourceTLSSecret: the Secret holding the run source's certificate and key. */}}
{{- define "harnessfacts.runSourceTLSSecret" -}}
{{- default (printf "%s-run-source-tls" (include "harnessfacts.fullname" .)) .Values.controller.runSource.tls.secretName }}
{{- end }}

{{/* runSourceCAConfigMap: the ConfigMap whose ca.crt node-agents trust for the run source. */}}
{{- define "harnessfacts.runSourceCAConfigMap" -}}
{{- default (printf "%s-run-source-ca" (include "harnessfacts.fullname" .)) .Values.controller.runSource.tls.caConfigMap }}
{{- end }}
