#!/usr/bin/env bash
# Issue 10 item 2 at UPDATE time: nothing a pod's author writes later is trusted either. The allocation guard
# (manifests/base/allocation-guard.yaml, a ValidatingAdmissionPolicy) refuses a change to HAMi's scheduler-owned
# annotations on an existing pod from anyone but gpuslice, HAMi's device plugin (the lab's agent runs as its
# ServiceAccount, lab/hami-device-plugin-rbac.yaml) and cluster administrators. A user with ordinary pod edit
# rights (alice, by impersonation) tries to free a card on paper and to redirect a pending pod; other
# annotations stay hers to change. Every write of gpuslice and of the agent passing the guard is shown by the
# whole suite binding and admitting pods with the guard installed; here the bound pod's bind-phase=success
# (written by the agent under its own identity) says it once more.
set -uo pipefail
source "$(dirname "$0")/lib.sh"
trap 'kubectl delete rolebinding,role -n "$NS" alice-edit --ignore-not-found >/dev/null 2>&1; e2e_cleanup' EXIT
NS=e2e-guard

section "allocation guard: scheduler-owned annotations refused at UPDATE for ordinary users (tenant-a)"
e2e_ns a "$NS" || { fail "guard: namespace $NS" "kubectl create namespace failed"; exit 1; }
if ! kubectl get validatingadmissionpolicy gpuslice-allocation-guard >/dev/null 2>&1; then
  fail "guard: gpuslice-allocation-guard installed" "ValidatingAdmissionPolicy not found"; exit 1
fi
kubectl -n "$NS" create role alice-edit --verb=get,list,update,patch --resource=pods >/dev/null &&
  kubectl -n "$NS" create rolebinding alice-edit --role=alice-edit --user=alice >/dev/null ||
  { fail "guard: RBAC for alice" "kubectl create role/rolebinding failed"; exit 1; }
ka() { kubectl --as=alice -n "$NS" "$@"; }

apply_pod "$NS" held 20000 30 >/dev/null
if wait_bound "$NS" held 30 && wait_for 20 bind_phase_success "$NS" held; then
  pass "guard: gpuslice's and the device plugin's own writes pass (bound, bind-phase=success)" \
    "allocated $(pod_annotation "$NS" held hami.io/vgpu-devices-allocated)"
else
  fail "guard: gpuslice's and the device plugin's own writes pass (bound, bind-phase=success)" \
    "node=$(pod_node "$NS" held) bind-phase=$(pod_annotation "$NS" held hami.io/bind-phase) $(pod_message "$NS" held)"
fi
before=$(pod_annotation "$NS" held hami.io/vgpu-devices-allocated)

# refused CHECK CMD...: the command must fail, naming the guard, and change nothing.
refused() {
  local check=$1 out rc; shift
  out=$("$@" 2>&1); rc=$?
  if ((rc != 0)) && [[ $out == *"gpuslice-allocation-guard: alice may not change"* ]]; then
    pass "$check" "$(grep -o 'gpuslice-allocation-guard: [^"]*' <<<"$out" | head -1)"
  else
    fail "$check" "rc=$rc: $out"
  fi
}
refused "guard: alice cannot shrink a bound pod's allocation (free a card on paper)" \
  ka annotate pod held --overwrite hami.io/vgpu-devices-allocated='GPU-x,NVIDIA,1,1:;'
refused "guard: alice cannot remove bind-phase" ka annotate pod held hami.io/bind-phase-
refused "guard: alice cannot add an allocation through a JSON merge patch" \
  ka patch pod held --type=merge -p '{"metadata":{"annotations":{"hami.io/vgpu-mig-allocations":"x"}}}'
after=$(pod_annotation "$NS" held hami.io/vgpu-devices-allocated)
[[ $after == "$before" ]] && pass "guard: the allocation is unchanged" "$after" ||
  fail "guard: the allocation is unchanged" "before=$before after=$after"

# A pending pod (asks for more than any card): no redirecting it with a hand-written allocation either.
apply_pod "$NS" waiting 90000 10 >/dev/null
wait_unschedulable "$NS" waiting 30 || fail "guard: an oversized pod stays Pending" "$(pod_message "$NS" waiting)"
refused "guard: alice cannot write an allocation on a pending pod" \
  ka annotate pod waiting hami.io/vgpu-node=tenant-a-gpu-0 hami.io/vgpu-devices-to-allocate='GPU-x,NVIDIA,1000,10:;'

if out=$(ka annotate pod held --overwrite example.com/owner=alice 2>&1); then
  pass "guard: other annotations stay the user's to change" "$out"
else
  fail "guard: other annotations stay the user's to change" "$out"
fi
# An administrator may repair (system:masters): a real change of bind-time on the bound pod (nothing reads it
# once bind-phase is success), then put back.
bt=$(pod_annotation "$NS" held hami.io/bind-time)
if out=$(kubectl -n "$NS" annotate pod held --overwrite hami.io/bind-time=1 2>&1) &&
  [[ $(pod_annotation "$NS" held hami.io/bind-time) == 1 ]]; then
  pass "guard: a cluster administrator is not refused" "$out"
else
  fail "guard: a cluster administrator is not refused" "$out"
fi
kubectl -n "$NS" annotate pod held --overwrite hami.io/bind-time="$bt" >/dev/null 2>&1
