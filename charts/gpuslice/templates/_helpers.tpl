{{/* Names: <fullname> (default "gpuslice"), truncated to 63 characters. */}}
{{- define "gpuslice.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- define "gpuslice.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- include "gpuslice.name" . -}}
{{- end -}}
{{- end -}}
{{- define "gpuslice.serviceName" -}}{{ include "gpuslice.fullname" . }}-webhook{{- end -}}
{{- define "gpuslice.serviceAccountName" -}}
{{- default (include "gpuslice.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}
{{- define "gpuslice.leaseNamespace" -}}
{{- default .Release.Namespace .Values.leaderElection.resourceNamespace -}}
{{- end -}}

{{/* The topology, checked once. */}}
{{- define "gpuslice.topology" -}}
{{- $t := .Values.topology -}}
{{- if not (has $t (list "worker" "sidecar" "policy")) -}}
{{- fail (printf "topology: %q is not one of worker, sidecar, policy" $t) -}}
{{- end -}}
{{- $t -}}
{{- end -}}
{{- define "gpuslice.webhookEnabled" -}}{{ if ne (include "gpuslice.topology" .) "policy" }}true{{ end }}{{- end -}}
{{- define "gpuslice.runsInTenant" -}}{{ if ne (include "gpuslice.topology" .) "sidecar" }}true{{ end }}{{- end -}}
{{- define "gpuslice.policyEnabled" -}}{{ if or (eq (include "gpuslice.topology" .) "policy") .Values.admissionPolicy.enabled }}true{{ end }}{{- end -}}

{{/* Labels: the kustomize base's app.kubernetes.io/name plus Helm's usual ones. Selectors use the first only. */}}
{{- define "gpuslice.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gpuslice.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}
{{- define "gpuslice.labels" -}}
{{ include "gpuslice.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- with .Values.tenant }}
gpuslice.io/tenant: {{ . }}
{{- end }}
{{- end -}}

{{- define "gpuslice.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ default .Chart.AppVersion .Values.image.tag }}
{{- end -}}
{{- end -}}

{{/* The CEL condition "this pod asks for a GPU resource", shared by the webhook's matchConditions, the guard
     and the admission policy: any container or init container with a key starting with the GPU resource's
     domain prefix (nvidia.com/gpu*) in limits or requests. */}}
{{- define "gpuslice.asksForGPU" -}}
{{- $p := .Values.resources.gpu -}}
object.spec.containers.exists(c, has(c.resources) &&
  ((has(c.resources.limits) && c.resources.limits.exists(k, k.startsWith('{{ $p }}'))) ||
   (has(c.resources.requests) && c.resources.requests.exists(k, k.startsWith('{{ $p }}'))))) ||
(has(object.spec.initContainers) && object.spec.initContainers.exists(c, has(c.resources) &&
  ((has(c.resources.limits) && c.resources.limits.exists(k, k.startsWith('{{ $p }}'))) ||
   (has(c.resources.requests) && c.resources.requests.exists(k, k.startsWith('{{ $p }}'))))))
{{- end -}}
