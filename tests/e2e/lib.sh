# Shared helpers for the end-to-end tests. Source it; every check prints PASS or FAIL with its evidence and
# the runner prints "N passed, N failed" at the end.
# shellcheck shell=bash

E2E_RESULTS=${E2E_RESULTS:-/tmp/gpuslice-e2e-results}
: >>"$E2E_RESULTS"

pass() { printf 'PASS  %s\n' "$1"; [[ -n ${2:-} ]] && printf '      %s\n' "$2"; echo "PASS $1" >>"$E2E_RESULTS"; }
fail() { printf 'FAIL  %s\n' "$1"; [[ -n ${2:-} ]] && printf '      %s\n' "$2"; echo "FAIL $1" >>"$E2E_RESULTS"; }

# use_tenant a|b: points kubectl (and $KUBECONFIG) at one tenant's API server.
use_tenant() { eval "$("$LAB" env "$1")"; }

# wait_for SECONDS CMD...: retries CMD every 0.2 s until it succeeds or the time is up (returns 1).
wait_for() {
  local deadline=$((SECONDS + $1)); shift
  until "$@" >/dev/null 2>&1; do
    ((SECONDS >= deadline)) && return 1
    sleep 0.2
  done
}

# pod_field NS NAME JSONPATH
pod_field() { kubectl -n "$1" get pod "$2" -o jsonpath="$3" 2>/dev/null; }
pod_bound() { [[ -n $(pod_field "$1" "$2" '{.spec.nodeName}') ]]; }
pod_unschedulable() {
  [[ $(pod_field "$1" "$2" '{.status.conditions[?(@.type=="PodScheduled")].reason}') == Unschedulable ]]
}
pod_message() { pod_field "$1" "$2" '{.status.conditions[?(@.type=="PodScheduled")].message}'; }

# gpu_pod NAME MEM_MIB CORES [GPUS] [extra annotations yaml]: prints a HAMi-style pod manifest.
gpu_pod() {
  local name=$1 mem=$2 cores=$3 gpus=${4:-1}
  cat <<YAML
apiVersion: v1
kind: Pod
metadata:
  name: $name
spec:
  terminationGracePeriodSeconds: 0
  containers:
  - name: cuda
    image: nvidia/cuda:12.4.1-base-ubuntu22.04
    command: ["sleep", "infinity"]
    resources:
      limits:
        nvidia.com/gpu: "$gpus"
$( [[ $mem != - ]] && printf '        nvidia.com/gpumem: "%s"\n' "$mem")
$( [[ $cores != - ]] && printf '        nvidia.com/gpucores: "%s"\n' "$cores")
YAML
}

# ---- added for the e2e suite (tests/e2e/*_test.sh) ----------------------------------------------------------
E2E_ROOT=${E2E_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
LAB=${LAB:-$E2E_ROOT/lab/lab.sh}
LAB_STATE=${GPUSLICE_LAB_STATE:-$E2E_ROOT/lab/.state}
SCHEDULER_NAME=${SCHEDULER_NAME:-gpuslice-scheduler}
unset HTTPS_PROXY HTTP_PROXY https_proxy http_proxy ALL_PROXY all_proxy || true
export NO_PROXY=127.0.0.1,localhost,::1

# note TEXT: an indented evidence line that is neither PASS nor FAIL.
note() { printf '      %s\n' "$*"; }
# section TITLE: a header for a group of checks.
section() { printf '\n== %s (%(%H:%M:%S)T)\n' "$1" -1; }

# now_ms: wall-clock milliseconds (for the durations the tests print, never asserted against a tight bound).
now_ms() { date +%s%3N; }

# lab_pid TENANT COMPONENT: PID of a lab process (e.g. `lab_pid a gpuslice`), empty when not running.
lab_pid() {
  local p; p=$(cat "$LAB_STATE/pids/$1-$2.pid" 2>/dev/null) || return 1
  [[ -n $p && -d /proc/$p ]] && [[ $(cut -d' ' -f3 "/proc/$p/stat" 2>/dev/null) != Z ]] && echo "$p"
}
# netns_of TENANT: the tenant's worker network namespace (<prefix>-TENANT, prefix as the running lab recorded it
# in lab.env, default gs). in_ns TENANT CMD...: runs CMD inside it.
netns_of() {
  local NETNS_PREFIX=gs
  [[ -f $LAB_STATE/lab.env ]] && NETNS_PREFIX=$(source "$LAB_STATE/lab.env"; echo "$NETNS_PREFIX")
  echo "$NETNS_PREFIX-$1"
}
in_ns() { local t=$1; shift; ip netns exec "$(netns_of "$t")" "$@"; }
# gpuslice_bin: the binary the lab runs (its private copy), else GPUSLICE_BIN, else the release build.
gpuslice_bin() {
  if [[ -x $LAB_STATE/bin/gpuslice ]]; then echo "$LAB_STATE/bin/gpuslice"
  else echo "${GPUSLICE_BIN:-$E2E_ROOT/build/release/cmd/gpuslice}"; fi
}
# agent_connected TENANT: the tenant's Konnectivity proxy-server has an agent (as lab.sh status reports it).
agent_connected() {
  "$LAB" status 2>/dev/null | awk -v t="  tenant-$1:" 'index($0, t) == 1 {on = 1; next} /^  tenant-/ {on = 0}
    on && /agent connected/ {print $3}' | grep -qx yes
}
# tenant_dir TENANT: the lab's state directory of the tenant (kubeconfigs, config, certificates).
tenant_dir() { echo "$LAB_STATE/tenant-$1"; }

# E2E namespaces: e2e_ns TENANT NAME creates the namespace in the tenant (current kubectl context is switched
# to it) and remembers it; e2e_cleanup deletes them all (waiting, bounded) so the next test finds the cards free.
declare -ga E2E_NAMESPACES=()
e2e_ns() {
  use_tenant "$1"
  kubectl delete namespace "$2" --ignore-not-found --wait=true --timeout=60s >/dev/null 2>&1
  kubectl create namespace "$2" >/dev/null || return 1
  E2E_NAMESPACES+=("$1/$2")
}
e2e_cleanup() {
  local e t n
  for e in "${E2E_NAMESPACES[@]}"; do
    t=${e%%/*} n=${e#*/}
    use_tenant "$t"
    kubectl -n "$n" delete pods --all --grace-period=0 --force --wait=false >/dev/null 2>&1
    kubectl delete namespace "$n" --wait=true --timeout=90s >/dev/null 2>&1 ||
      printf '      (cleanup: namespace %s of tenant %s not gone after 90 s)\n' "$n" "$t"
  done
  E2E_NAMESPACES=()
}

# apply_pod NS NAME MEM CORES [GPUS] [SCHEDULER]: creates a HAMi-style GPU pod (gpu_pod) in NS; SCHEDULER, when
# given, is written into spec.schedulerName (so the pod is admitted even while the webhook is unreachable).
apply_pod() {
  local ns=$1 name=$2 mem=$3 cores=$4 gpus=${5:-1} sched=${6:-}
  if [[ -n $sched ]]; then
    gpu_pod "$name" "$mem" "$cores" "$gpus" | sed "s/^spec:/spec:\n  schedulerName: $sched/" | kubectl -n "$ns" apply -f - 2>&1
  else
    gpu_pod "$name" "$mem" "$cores" "$gpus" | kubectl -n "$ns" apply -f - 2>&1
  fi
}
# plain_pod NAME: a pod asking for no GPU resource.
plain_pod() {
  cat <<YAML
apiVersion: v1
kind: Pod
metadata:
  name: $1
spec:
  terminationGracePeriodSeconds: 0
  containers:
  - name: app
    image: busybox:1.36
    command: ["sleep", "infinity"]
    resources:
      limits: {cpu: 100m, memory: 64Mi}
YAML
}

pod_annotation() { pod_field "$1" "$2" "{.metadata.annotations.${3//./\\.}}"; }
pod_node() { pod_field "$1" "$2" '{.spec.nodeName}'; }
pod_reason() { pod_field "$1" "$2" '{.status.conditions[?(@.type=="PodScheduled")].reason}'; }
# pod_uuids NS NAME: the UUIDs of hami.io/vgpu-devices-allocated, space-separated.
pod_uuids() {
  pod_annotation "$1" "$2" hami.io/vgpu-devices-allocated | tr ':;' '\n\n' | awk -F, 'NF >= 4 {print $1}' | xargs
}
# wait_bound NS NAME SECONDS / wait_unschedulable NS NAME SECONDS
wait_bound() { wait_for "$3" pod_bound "$1" "$2"; }
wait_unschedulable() { wait_for "$3" pod_unschedulable "$1" "$2"; }
bind_phase_success() { [[ $(pod_annotation "$1" "$2" hami.io/bind-phase) == success ]]; }

# node_locks: "node=value" for every node of the current tenant holding hami.io/mutex.lock (empty when none).
node_locks() {
  kubectl get nodes -o json | jq -r '.items[] | select(.metadata.annotations["hami.io/mutex.lock"] != null)
    | "\(.metadata.name)=\(.metadata.annotations["hami.io/mutex.lock"])"'
}
no_node_locks() { [[ -z $(node_locks) ]]; }

# allocation_report: from the API alone, for the current tenant, sums per card UUID of the memory and cores in
# hami.io/vgpu-devices-allocated of every pod that holds a card (hami.io/vgpu-node set, not Succeeded/Failed,
# not being deleted), against the card's devmem/devcore/count from its node's hami.io/node-nvidia-register.
# Prints one line per card "UUID node mem/devmem cores/devcore pods/count OK|OVER" and returns 1 when any card
# is over-committed (or an allocation names a card its node does not register).
allocation_report() {
  local pods nodes
  pods=$(kubectl get pods -A -o json) nodes=$(kubectl get nodes -o json)
  python3 - <(printf '%s' "$pods") <(printf '%s' "$nodes") <<'PY'
import json, sys
pods = json.load(open(sys.argv[1]))["items"]
nodes = json.load(open(sys.argv[2]))["items"]
cards = {}
for n in nodes:
    reg = (n["metadata"].get("annotations") or {}).get("hami.io/node-nvidia-register")
    if not reg:
        continue
    for d in json.loads(reg):
        cards[d["id"]] = {"node": n["metadata"]["name"], "devmem": d.get("devmem", 0), "devcore": d.get("devcore", 0),
                          "count": d.get("count", 0), "mem": 0, "cores": 0, "pods": 0}
bad = []
for p in pods:
    a = p["metadata"].get("annotations") or {}
    if "hami.io/vgpu-node" not in a or p.get("status", {}).get("phase") in ("Succeeded", "Failed"):
        continue
    if p["metadata"].get("deletionTimestamp"):
        continue
    who = p["metadata"]["namespace"] + "/" + p["metadata"]["name"]
    for ctr in a.get("hami.io/vgpu-devices-allocated", "").split(";"):
        for dev in ctr.split(":"):
            f = dev.split(",")
            if len(f) < 4:
                continue
            c = cards.get(f[0])
            if c is None:
                bad.append(f"{who} holds unknown card {f[0]}")
                continue
            if c["node"] != a["hami.io/vgpu-node"]:
                bad.append(f"{who}: card {f[0]} is on {c['node']}, vgpu-node says {a['hami.io/vgpu-node']}")
            c["mem"] += int(f[2]); c["cores"] += int(f[3]); c["pods"] += 1
status = 0
for uuid, c in sorted(cards.items()):
    over = c["mem"] > c["devmem"] or c["cores"] > c["devcore"] or c["pods"] > c["count"]
    status |= over
    print(f'{uuid} {c["node"]} mem {c["mem"]}/{c["devmem"]} cores {c["cores"]}/{c["devcore"]} '
          f'slices {c["pods"]}/{c["count"]} {"OVER" if over else "OK"}')
for b in bad:
    print("BAD " + b)
sys.exit(1 if status or bad else 0)
PY
}

# e2e_gpuslice_metrics TENANT: gpuslice's Prometheus text from inside the tenant's namespace (health port).
e2e_gpuslice_metrics() {
  local t=$1 port=${2:-8080}
  in_ns "$t" curl -sf --max-time 5 "http://127.0.0.1:$port/metrics" 2>/dev/null ||
    in_ns "$t" curl -skf --max-time 5 "https://127.0.0.1:$port/metrics" 2>/dev/null
}

# lease_holder: holderIdentity of the scheduler's Lease in the current tenant.
lease_holder() {
  kubectl -n gpuslice-system get lease gpuslice-scheduler -o jsonpath='{.spec.holderIdentity}' 2>/dev/null
}

# E2E_TABLE (optional file): check_result appends "check<TAB>tenant<TAB>result<TAB>evidence" for summaries.
# check_result ID TENANT ok|ko TITLE EVIDENCE
check_result() {
  local id=$1 tenant=$2 res=$3 title=$4 ev=${5:-}
  if [[ $res == ok ]]; then pass "$id ($tenant): $title" "$ev"; else fail "$id ($tenant): $title" "$ev"; fi
  [[ -n ${E2E_TABLE:-} ]] &&
    printf '%s\t%s\t%s\t%s\n' "$id" "$tenant" "$([[ $res == ok ]] && echo PASS || echo FAIL)" \
      "$(printf '%s' "$ev" | tr '\n\t' '  ' | cut -c1-220)" >>"$E2E_TABLE"
  return 0
}

# seed_scenario NS ID_SHARE ID_CORE ID_MEM: the seed's single-card scenario on tenant-a's A100 (current tenant
# must be a), read from the API: share-1..3 (20000 MiB / 30 %) bound to the same card, share-4 (30 %) Pending
# with CardInsufficientCore, big (90000 MiB) Pending with CardInsufficientMemory. Reports through check_result
# with the three ids. Leaves the pods in place (the caller may go on with the requeue step).
seed_scenario() {
  local ns=$1 id_share=$2 id_core=$3 id_mem=$4 i out uuids=() nodes=() all_bound=1 why=""
  for i in 1 2 3; do
    out=$(apply_pod "$ns" "share-$i" 20000 30)
    if ! wait_bound "$ns" "share-$i" 30; then
      all_bound=0
      why+="share-$i not bound after 30 s ($out; PodScheduled: $(pod_reason "$ns" "share-$i") $(pod_message "$ns" "share-$i")) "
    fi
  done
  for i in 1 2 3; do uuids+=("$(pod_uuids "$ns" "share-$i")"); nodes+=("$(pod_node "$ns" "share-$i")"); done
  local distinct; distinct=$(printf '%s\n' "${uuids[@]}" | sort -u | grep -c .)
  if ((all_bound)) && [[ $distinct == 1 && -n ${uuids[0]} && ${uuids[0]} != *" "* ]]; then
    check_result "$id_share" tenant-a ok "three 20000 MiB / 30% pods share the A100" \
      "share-1,2,3 on ${nodes[0]} card ${uuids[0]}; $(allocation_report | grep -F "${uuids[0]}" | cut -d' ' -f3-8)"
  else
    check_result "$id_share" tenant-a ko "three 20000 MiB / 30% pods share the A100" \
      "${why}UUIDs: ${uuids[*]:-none}; nodes: ${nodes[*]:-none}"
  fi
  out=$(apply_pod "$ns" share-4 20000 30)
  if wait_unschedulable "$ns" share-4 30 && [[ $(pod_message "$ns" share-4) == *CardInsufficientCore* ]] &&
     [[ -z $(pod_node "$ns" share-4) ]]; then
    check_result "$id_core" tenant-a ok "a fourth 30% pod stays Pending with CardInsufficientCore" \
      "share-4 Pending, PodScheduled=False Unschedulable: $(pod_message "$ns" share-4)"
  else
    check_result "$id_core" tenant-a ko "a fourth 30% pod stays Pending with CardInsufficientCore" \
      "$out; node=\"$(pod_node "$ns" share-4)\" PodScheduled: $(pod_reason "$ns" share-4) $(pod_message "$ns" share-4)"
  fi
  out=$(apply_pod "$ns" big 90000 -)
  if wait_unschedulable "$ns" big 30 && [[ $(pod_message "$ns" big) == *CardInsufficientMemory* ]] &&
     [[ -z $(pod_node "$ns" big) ]]; then
    check_result "$id_mem" tenant-a ok "a 90000 MiB pod stays Pending with CardInsufficientMemory" \
      "big Pending, PodScheduled=False Unschedulable: $(pod_message "$ns" big)"
  else
    check_result "$id_mem" tenant-a ko "a 90000 MiB pod stays Pending with CardInsufficientMemory" \
      "$out; node=\"$(pod_node "$ns" big)\" PodScheduled: $(pod_reason "$ns" big) $(pod_message "$ns" big)"
  fi
}

# tunnel_packets TENANT: packets the tenant's Konnectivity proxy-server received from its API server (DIAL_REQ,
# DATA, ...), from its admin /metrics; it grows exactly when the API server dials through the tunnel (the webhook
# is the only service-referenced backend). Empty when the admin port does not answer.
konn_admin_port() {
  local KONN_PORT_BASE=8132 i=0 t
  [[ -f $LAB_STATE/lab.env ]] && KONN_PORT_BASE=$(source "$LAB_STATE/lab.env"; echo "$KONN_PORT_BASE")
  for t in $(cat "$LAB_STATE/tenants" 2>/dev/null); do
    [[ $t == "$1" ]] && { echo $((KONN_PORT_BASE + 100 * i + 1)); return; }
    i=$((i + 1))
  done
  return 1
}
tunnel_packets() {
  local port; port=$(konn_admin_port "$1") || return 1
  curl -sf --max-time 3 "http://127.0.0.1:$port/metrics" |
    awk '/^konnectivity_network_proxy_server_stream_packets_total\{.*segment="from_client"/ {n += $NF} END {if (NR) printf "%d\n", n}'
}

# scheduled_by NS NAME: reportingInstance of the pod's Scheduled event (events.k8s.io/v1): the identity of the
# gpuslice replica that bound it.
scheduled_by() {
  kubectl -n "$1" get events.events.k8s.io -o json 2>/dev/null | jq -r --arg n "$2" \
    '[.items[] | select(.regarding.name == $n and .reason == "Scheduled") | .reportingInstance][0] // ""'
}

# Tests that run the same pods in tenant-a (gpuslice) and tenant-b (upstream kube-scheduler, the judge).
kca() { kubectl --kubeconfig "$(tenant_dir a)/admin.kubeconfig" "$@"; }
kcb() { kubectl --kubeconfig "$(tenant_dir b)/admin.kubeconfig" "$@"; }
# twin_cleanup NS STARTED_SCHED [EXTRA_FN] NODE...: in both tenants, force-deletes the pods of NS, NS itself and
# the NODEs, runs EXTRA_FN with kca or kcb (more objects of the test) when it is not "-", stops tenant-b's
# kube-scheduler when STARTED_SCHED is 1, then waits (60 s at most) for NS to be gone in both.
twin_cleanup() {
  local ns=$1 started=$2 extra=$3 k
  shift 3
  for k in kca kcb; do
    $k -n "$ns" delete pods --all --grace-period=0 --force --wait=false >/dev/null 2>&1
    $k delete namespace "$ns" --wait=false >/dev/null 2>&1
    [[ $extra != - ]] && "$extra" "$k"
    (($#)) && $k delete node "$@" --wait=false >/dev/null 2>&1
  done
  ((started)) && "$LAB" stop b kube-scheduler >/dev/null 2>&1
  twin_ns_gone() { ! $1 get namespace "$2" >/dev/null 2>&1; }
  wait_for 60 twin_ns_gone kca "$ns"
  wait_for 60 twin_ns_gone kcb "$ns"
}

# accountant_check ID [--namespace NS]... [--ledger FILE] [--settle S]: the independent accountant
# (tests/e2e/accountant.py) on tenant-a from the API alone: no card over-committed as HAMi counts it, no GPU
# pod of ours lost, no node lock left past its allocation. Reports PASS/FAIL "ID: accountant" with its verdict.
accountant_check() {
  local id=$1 out rc; shift
  out=$(python3 "$E2E_ROOT/tests/e2e/accountant.py" --kubeconfig "$(tenant_dir a)/admin.kubeconfig" "$@" 2>&1)
  rc=$?
  if ((rc == 0)); then pass "$id: accountant's verdict" "$(tail -1 <<<"$out")"; else fail "$id: accountant's verdict" "$out"; fi
  return $rc
}

# run_doctor TENANT [ARGS...]: `gpuslice doctor` with the tenant's admin kubeconfig; its output goes to
# DOCTOR_OUT, its exit status is returned. doctor_verdict CHECK: PASS/FAIL/SKIP of CHECK in DOCTOR_OUT.
# doctor_block CHECK: that check's lines (for evidence).
run_doctor() {
  local t=$1; shift
  DOCTOR_OUT=$("$(gpuslice_bin)" doctor --kubeconfig "$(tenant_dir "$t")/admin.kubeconfig" "$@" 2>&1)
}
doctor_verdict() { awk -v c="$1" '$2 == c && ($1 == "PASS" || $1 == "FAIL" || $1 == "SKIP") {print $1; exit}' <<<"$DOCTOR_OUT"; }
doctor_block() {
  awk -v c="$1" '($1 == "PASS" || $1 == "FAIL" || $1 == "SKIP") {on = ($2 == c)} /^doctor:/ {on = 0} on' <<<"$DOCTOR_OUT" | tr -s ' ' | tr '\n' ' '
}
