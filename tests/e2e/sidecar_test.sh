#!/usr/bin/env bash
# The Kamaji sidecar topology (docs/deploy-kamaji.md §2): gpuslice as an additional container of the
# TenantControlPlane pod, beside the tenant's kube-apiserver (the lab's host side, `lab/lab.sh start a sidecar`),
# with the webhook registered BY URL on localhost (charts/gpuslice topology sidecar) and the scheduling loop on
# the API server's own address. On tenant a:
#   1. the sidecar's MutatingWebhookConfiguration names https://127.0.0.1:<port>/mutate, no Service;
#   2. the worker-side gpuslice stops: the sidecar takes the Lease over (same ServiceAccount, same Lease, as the
#      replicas of a TenantControlPlane would);
#   3. the Konnectivity agent stops (the tunnel is down): a GPU pod in the sidecar webhook's namespace is still
#      mutated by the webhook and bound by the sidecar's loop, while a GPU pod sent to the worker-side webhook
#      (through the tunnel) is refused by the scheduler guard;
#   4. `gpuslice doctor` (probe namespace: the sidecar's) passes with the tunnel down: it finds the URL webhook,
#      the sidecar's ConfigMap, Secret and Lease by what they point at; with the sidecar stopped it fails, blaming
#      the webhook at the URL (webhook-down), not the tunnel;
#   5. everything restarts as it was (agent, worker-side gpuslice leading again).
# The sidecar webhook is scoped to one namespace (labelled gpuslice.io/webhook=ignore so the worker-side webhook
# skips it): both webhooks of one tenant never mutate the same pod.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=lib.sh
source "$ROOT/tests/e2e/lib.sh"
S=sidecar-$$ N=sidecar-ref-$$
use_tenant a || { fail "tenant a" "lab/lab.sh env a failed"; exit 1; }
agent_stopped=false worker_stopped=false
lease() { kubectl -n gpuslice-system get lease gpuslice-scheduler -o jsonpath='{.spec.holderIdentity}' 2>/dev/null; }
cleanup() {
  use_tenant a
  $agent_stopped && "$LAB" start a agent >/dev/null 2>&1
  "$LAB" stop a sidecar >/dev/null 2>&1
  $worker_stopped && "$LAB" start a gpuslice >/dev/null 2>&1
  kubectl delete namespace "$S" "$N" --wait=false >/dev/null 2>&1
}
trap cleanup EXIT
read -r WPORT _ < <(p=$(source "$LAB_STATE/lab.env"; echo "$API_PORT_BASE"); echo "$((p + 1))")

section "gpuslice beside tenant a's API server (lab/lab.sh start a sidecar)"
kubectl create namespace "$S" >/dev/null && kubectl label namespace "$S" gpuslice.io/webhook=ignore gpuslice.io/e2e="$S" >/dev/null
kubectl create namespace "$N" >/dev/null
holder0=$(lease)
if out=$("$LAB" start a sidecar --set-json "webhook.namespaceSelector={\"matchLabels\":{\"gpuslice.io/e2e\":\"$S\"}}" 2>&1); then
  pass "sidecar started on the management side (host), answering /readyz on 127.0.0.1:$WPORT" "pid $(lab_pid a sidecar)"
else
  fail "sidecar started" "$out"; exit 1
fi
cc=$(kubectl get mutatingwebhookconfiguration gpuslice-sidecar -o jsonpath='{.webhooks[0].clientConfig.url} service={.webhooks[0].clientConfig.service}')
[[ $cc == "https://127.0.0.1:$WPORT/mutate service=" ]] && pass "the webhook is registered by URL on localhost, no Service" "$cc" ||
  fail "the webhook is registered by URL on localhost" "$cc"
[[ -z $(ip netns pids "$(netns_of a)" | grep -x "$(lab_pid a sidecar)") ]] &&
  pass "the sidecar is not in the worker network namespace $(netns_of a)" ||
  fail "the sidecar is not in the worker network namespace" "pid $(lab_pid a sidecar) is in $(netns_of a)"

section "the sidecar takes the scheduling Lease over from the worker-side gpuslice"
"$LAB" stop a gpuslice >/dev/null 2>&1 && worker_stopped=true
t0=$(now_ms)
took_over() { local h; h=$(lease); [[ -n $h && $h != "$holder0" ]]; }
if wait_for 40 took_over; then
  pass "Lease gpuslice-system/gpuslice-scheduler moved to the sidecar" "$holder0 -> $(lease) in $(( $(now_ms) - t0 )) ms (lease 15 s)"
else
  fail "Lease moved to the sidecar" "holder still $(lease); $(tail -3 "$LAB_STATE/logs/a-sidecar.log" | tr '\n' ' ')"
fi

section "the tunnel down: admission and scheduling go on beside the API server"
"$LAB" stop a agent >/dev/null 2>&1 && agent_stopped=true
agent_down() { ! curl -sf "http://127.0.0.1:$(( $(source "$LAB_STATE/lab.env"; echo "$KONN_PORT_BASE") + 2 ))/readyz" >/dev/null; }
wait_for 15 agent_down || note "proxy-server of tenant a still reports an agent after 15 s"
t0=$(now_ms)
gpu_pod side-pod 6000 20 | kubectl -n "$S" apply -f - >/tmp/sidecar-$$.out 2>&1
if wait_for 30 pod_bound "$S" side-pod; then
  pass "tunnel down: a GPU pod is mutated by the sidecar webhook and bound by the sidecar's loop" \
    "in $(( $(now_ms) - t0 )) ms: schedulerName=$(pod_field "$S" side-pod '{.spec.schedulerName}') node=$(pod_field "$S" side-pod '{.spec.nodeName}') request=$(pod_field "$S" side-pod '{.metadata.annotations.gpuslice\.io/gpu-request}') allocated=$(pod_field "$S" side-pod '{.metadata.annotations.hami\.io/vgpu-devices-allocated}')"
else
  fail "tunnel down: a GPU pod is mutated and bound beside the API server" "$(cat /tmp/sidecar-$$.out) schedulerName=$(pod_field "$S" side-pod '{.spec.schedulerName}') $(pod_message "$S" side-pod)"
fi
rm -f /tmp/sidecar-$$.out
out=$(gpu_pod ref-pod 6000 20 | kubectl -n "$N" create --dry-run=server -f - 2>&1)
[[ $? -ne 0 && $out == *gpuslice-*scheduler-guard* ]] &&
  pass "tunnel down (and the worker-side gpuslice stopped): the same pod for the worker-side webhook is refused by the guard" "$out" ||
  fail "tunnel down: the same pod for the worker-side webhook is refused by the guard" "$out"
grep -qE "ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:" "$LAB_STATE/logs/a-sidecar.log" &&
  fail "no sanitizer report in the sidecar's log" "$(grep -m3 -E 'ERROR:|runtime error' "$LAB_STATE/logs/a-sidecar.log")"

section "gpuslice doctor in the sidecar topology (tunnel still down)"
if run_doctor a --probe-namespace "$S"; then
  pass "doctor passes the sidecar path with the tunnel down" "$(grep -E '^(PASS|FAIL|SKIP) |^doctor:' <<<"$DOCTOR_OUT" | tr -s ' ' | tr '\n' ' ')"
else
  fail "doctor passes the sidecar path with the tunnel down" "$DOCTOR_OUT"
fi
wc_block=$(doctor_block webhook-config)
[[ $wc_block == *"gpuslice-sidecar"*"registered by url on localhost (127.0.0.1:$WPORT)"* ]] &&
  pass "doctor: the sidecar's URL webhook is the one serving $S" "$wc_block" ||
  fail "doctor: the sidecar's URL webhook is the one serving $S" "$wc_block"
[[ $(doctor_verdict tunnel) == SKIP && $(doctor_block tunnel) == *"does not cross the tunnel"* ]] &&
  pass "doctor: the broken tunnel is reported as off gpuslice's path" "$(doctor_block tunnel)" ||
  fail "doctor: the broken tunnel is reported as off gpuslice's path" "$(doctor_block tunnel)"
[[ $(doctor_block serving-cert) == *"gpuslice-sidecar-webhook-tls"*"SAN 127.0.0.1: present"* ]] &&
  pass "doctor: the sidecar's serving Secret found by its chain to the caBundle" "$(doctor_block serving-cert)" ||
  fail "doctor: the sidecar's serving Secret found by its chain to the caBundle" "$(doctor_block serving-cert)"
[[ $(doctor_block scheduler-lease) == *"Lease named by ConfigMap gpuslice-system/gpuslice-sidecar-config"*"held and fresh"* ]] &&
  pass "doctor: the Lease named by the sidecar's configuration, held" "$(doctor_block scheduler-lease)" ||
  fail "doctor: the Lease named by the sidecar's configuration, held" "$(doctor_block scheduler-lease)"
# The sidecar process stops, its URL webhook stays registered (`lab.sh stop a sidecar` below also deletes it).
side_pid=$(lab_pid a sidecar)
kill -TERM "$side_pid" 2>/dev/null
sidecar_gone() { ! kill -0 "$side_pid" 2>/dev/null; }
wait_for 15 sidecar_gone || note "the sidecar (pid $side_pid) still runs 15 s after SIGTERM"
if ! run_doctor a --probe-namespace "$S" && [[ $(doctor_block gpu-pod-dry-run) == *"https://127.0.0.1:$WPORT/mutate"*"[webhook-down]"* ]]; then
  pass "doctor fails the sidecar path with the sidecar stopped, blaming the webhook at the URL" "$(doctor_block gpu-pod-dry-run)"
else
  fail "doctor fails the sidecar path with the sidecar stopped, blaming the webhook at the URL" "$DOCTOR_OUT"
fi

section "back to the worker-side topology"
"$LAB" start a agent >/dev/null 2>&1 && agent_stopped=false
"$LAB" stop a sidecar >/dev/null 2>&1
"$LAB" start a gpuslice >/dev/null 2>&1 && worker_stopped=false
wait_for 30 agent_connected a
back() { local h; h=$(lease); [[ -n $h ]] && grep -q "became leader\" identity=\"$h\"" "$LAB_STATE/logs/a-gpuslice.log"; }
if wait_for 45 back; then pass "the worker-side gpuslice leads again" "holder $(lease)"
else fail "the worker-side gpuslice leads again" "holder $(lease)"; fi
try_gpu() {
  kubectl -n "$N" delete pod after --ignore-not-found --wait=true --timeout=10s >/dev/null 2>&1
  gpu_pod after 1000 5 | kubectl -n "$N" apply -f - >/dev/null 2>&1 && [[ $(pod_field "$N" after '{.spec.schedulerName}') == "$SCHEDULER_NAME" ]]
}
wait_for 30 try_gpu && wait_for 30 pod_bound "$N" after && pass "a GPU pod goes through the tunnel again and is bound" ||
  fail "a GPU pod goes through the tunnel again and is bound" "$(pod_message "$N" after)"
