{{/* Pieces of the MutatingAdmissionPolicy's CEL (admission-policy.yaml), mirroring webhook/policy.cc's mutate_pod.
     "c" is the container, "i" its index. Kubernetes' CEL has no list flatten, so every mutation yields at most
     one JSON patch per container (transformList with a filter), and a later mutation sees the earlier ones'
     result (MutatingAdmissionPolicy applies its mutations in order). */}}
{{- define "gpuslice.map.hasRes" -}}
(has(c.resources) && ((has(c.resources.limits) && '{{ .k }}' in c.resources.limits) || (has(c.resources.requests) && '{{ .k }}' in c.resources.requests)))
{{- end -}}
{{- define "gpuslice.map.inLimits" -}}
(has(c.resources) && has(c.resources.limits) && '{{ .k }}' in c.resources.limits)
{{- end -}}
{{- define "gpuslice.map.resVal" -}}
quantity(string(has(c.resources.limits) && '{{ .k }}' in c.resources.limits ? c.resources.limits['{{ .k }}'] : c.resources.requests['{{ .k }}']))
{{- end -}}
{{- /* The container's GPU count > 0: its nvidia.com/gpu (limits first), else defaultGPUNum when it asks for
       memory, a memory percentage or cores (common/gpu_request.cc). */}}
{{- define "gpuslice.map.gpuPod" -}}
{{- $r := .Values.resources -}}
({{ include "gpuslice.map.hasRes" (dict "k" $r.gpu) }} ?
  {{ include "gpuslice.map.resVal" (dict "k" $r.gpu) }}.isGreaterThan(quantity('0')) :
  (({{ include "gpuslice.map.hasRes" (dict "k" $r.memory) }} || {{ include "gpuslice.map.hasRes" (dict "k" $r.memoryPercentage) }} ||
    {{ include "gpuslice.map.hasRes" (dict "k" $r.cores) }}) && {{ int64 $r.defaultGPUNum }} > 0))
{{- end -}}
{{- /* The count the webhook writes into limits when the GPU resource is missing there. */}}
{{- define "gpuslice.map.gpuCount" -}}
{{- $r := .Values.resources -}}
({{ include "gpuslice.map.hasRes" (dict "k" $r.gpu) }} ? string({{ include "gpuslice.map.resVal" (dict "k" $r.gpu) }}.asInteger()) : '{{ int64 $r.defaultGPUNum }}')
{{- end -}}
{{- define "gpuslice.map.needsGpuLimit" -}}
({{ include "gpuslice.map.gpuPod" . }} && !{{ include "gpuslice.map.inLimits" (dict "k" .Values.resources.gpu) }})
{{- end -}}
{{- /* HAMi's defaultExclusiveCoreIfNeeded: no cores asked, and a 100 % memory percentage or no memory asked. */}}
{{- define "gpuslice.map.needsCores" -}}
{{- $r := .Values.resources -}}
({{ include "gpuslice.map.gpuPod" . }} && !{{ include "gpuslice.map.hasRes" (dict "k" $r.cores) }} &&
  ({{ include "gpuslice.map.hasRes" (dict "k" $r.memoryPercentage) }} ?
     {{ include "gpuslice.map.resVal" (dict "k" $r.memoryPercentage) }}.compareTo(quantity('100')) == 0 :
     !{{ include "gpuslice.map.hasRes" (dict "k" $r.memory) }}))
{{- end -}}
{{- /* The new env list is written as plain maps, not Object.spec.containers.env{...}: kube-apiserver v1.34.3
       panics (reflect.Set: *structpb.Struct is not assignable to *structpb.Value, cel-go list ConvertToNative)
       on a JSON patch whose value is a LIST of typed objects; single typed objects work. */}}
{{- /* ensure_env: env NAME=VALUE in container c at index i of list L. "wants": the predicate (when false,
       nothing); one patch: create env, append, or replace the LAST entry of that name unless it already holds
       exactly that value. */}}
{{- define "gpuslice.map.envIdx" -}}c.env.map(e, e.name).lastIndexOf('{{ .name }}'){{- end -}}
{{- define "gpuslice.map.ensureEnvFilter" -}}
({{ .wants }}) && (!has(c.env) || {{ include "gpuslice.map.envIdx" . }} == -1 ||
  c.env[{{ include "gpuslice.map.envIdx" . }}].?value.orValue('') != {{ .value }} ||
  has(c.env[{{ include "gpuslice.map.envIdx" . }}].valueFrom))
{{- end -}}
{{- define "gpuslice.map.ensureEnvPatch" -}}
!has(c.env) ?
  JSONPatch{op: "add", path: "/spec/{{ .list }}/" + string(i) + "/env", value: [{'name': '{{ .name }}', 'value': {{ .value }}}]} :
{{ include "gpuslice.map.envIdx" . }} == -1 ?
  JSONPatch{op: "add", path: "/spec/{{ .list }}/" + string(i) + "/env/-", value: Object.spec.{{ .list }}.env{name: '{{ .name }}', value: {{ .value }}}} :
  JSONPatch{op: "replace", path: "/spec/{{ .list }}/" + string(i) + "/env/" + string({{ include "gpuslice.map.envIdx" . }}),
    value: Object.spec.{{ .list }}.env{name: '{{ .name }}', value: {{ .value }}}}
{{- end -}}
