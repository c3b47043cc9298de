#!/usr/bin/env bash
# Issue 16: the status page in a real browser, `gpuslice top` / `kubectl gpuslice top`, and the metrics the Grafana
# dashboards query - all against the seed's scenario (examples/tenant-a/pods.yaml) on tenant-a.
#   - Debian's chromium, headless, inside tenant-a's network namespace (where the health port is), loads
#     http://127.0.0.1:8080/status; its rendered DOM (--dump-dom) must show the shared A100 with three pods and
#     60000/81920 MiB, and share-4 / big Pending with CardInsufficientCore / CardInsufficientMemory. A screenshot,
#     the DOM, the JSON and top's output are saved in $E2E_ARTEFACTS (default: the lab state dir's
#     artefacts/status-page, which lab.sh down keeps).
#   - `gpuslice top` and `kubectl gpuslice top` (the kubectl-gpuslice link), from the API alone, show the same.
#   - every series manifests/grafana/gpuslice-dashboard.json and HAMi's dashboards (tests/data/hami-dashboards) query
#     from gpuslice is on /metrics with the labels they use (tests/e2e/dashboard_check.py); the view's age is shown.
#   - with scheduler.hamiLegacyMetrics: false in its config (tenant-a's gpuslice restarted, then restored) no legacy
#     name is on /metrics, HAMi v2.10's all are, and HAMi's dashboard still finds every series it queries.
set -uo pipefail
source "$(dirname "$0")/lib.sh"
trap 'e2e_cleanup; [[ -n ${CHROME_DIR:-} ]] && rm -rf "$CHROME_DIR"' EXIT
NS=e2e-status
ART=${E2E_ARTEFACTS:-$LAB_STATE/artefacts/status-page}
mkdir -p "$ART"
BIN=$(gpuslice_bin)

section "seed scenario for the status page (tenant-a)"
e2e_ns a "$NS" || { fail "status: namespace $NS" "kubectl create namespace failed"; exit 1; }
seed_scenario "$NS" "status: seed share" "status: seed core" "status: seed memory"
UUID=$(pod_uuids "$NS" share-1)
NODE=$(pod_node "$NS" share-1)
note "the shared card: $UUID on $NODE"

# The page's JSON: the loop's view is at most 1 s old, so wait until it shows every pod of the scenario.
status_json() { in_ns a curl -sf --max-time 5 "http://127.0.0.1:8080/status.json?limit=100&${1:-}"; }
view_ready() {
  status_json | jq -e --arg ns "$NS" '([.nodes.items[].cards[].pods[] | select(.namespace == $ns)] | length) == 3
    and ([.pending.items[] | select(.namespace == $ns and .reason != "Waiting")] | length) == 2' >/dev/null
}
section "status JSON"
if wait_for 20 view_ready; then
  status_json >"$ART/status.json"
  card=$(jq -c --arg u "$UUID" '.nodes.items[].cards[] | select(.uuid == $u)' "$ART/status.json")
  got="$(jq -r '"\(.memUsedMiB)/\(.memTotalMiB) MiB, \(.coresUsed)/\(.coresTotal) cores, \([.pods[].pod] | join(","))"' <<<"$card")"
  if [[ $got == "60000/81920 MiB, 90/100 cores, share-1,share-2,share-3" ]]; then
    pass "status: /status.json shows the A100 with share-1..3, 60000/81920 MiB, 90/100 cores" "$got"
  else
    fail "status: /status.json shows the A100 with share-1..3, 60000/81920 MiB, 90/100 cores" "got: $got"
  fi
  reasons=$(jq -r --arg ns "$NS" '[.pending.items[] | select(.namespace == $ns) | "\(.name)=\(.reason)"] | sort | join(" ")' "$ART/status.json")
  if [[ $reasons == "big=CardInsufficientMemory share-4=CardInsufficientCore" ]]; then
    pass "status: /status.json lists the Pending pods with their reasons" "$reasons"
  else
    fail "status: /status.json lists the Pending pods with their reasons" "got: $reasons"
  fi
  bad=$(in_ns a curl -s --max-time 5 -o /dev/null -w '%{http_code}' "http://127.0.0.1:8080/status.json?limit=0")
  [[ $bad == 400 ]] && pass "status: a bad query parameter answers 400" "limit=0 -> $bad" ||
    fail "status: a bad query parameter answers 400" "limit=0 -> $bad"
  bytes=$(stat -c %s "$ART/status.json")
  note "status.json with the lab's nodes: $bytes bytes"
else
  status_json >"$ART/status.json" 2>&1
  fail "status: /status.json shows the seed scenario within 20 s" "$(head -c 2000 "$ART/status.json")"
fi

section "status page in headless chromium"
if ! command -v chromium >/dev/null 2>&1; then
  fail "status: chromium installed" "chromium not found (lab/install-deps.sh installs it)"
else
  CHROME_DIR=$(mktemp -d /tmp/gpuslice-chromium.XXXXXX)
  chrome() {
    # As root: --no-sandbox. Without the background-networking flags chromium tries the network, which is closed.
    in_ns a timeout 60 chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
      --disable-background-networking --disable-component-update --disable-sync --disable-extensions \
      --disable-default-apps --user-data-dir="$CHROME_DIR" --window-size=1400,1500 --virtual-time-budget=4000 "$@" \
      "http://127.0.0.1:8080/status?q=$NODE" 2>>"$ART/chromium.log"
  }
  chrome --dump-dom >"$ART/status-page.dom.html"
  chrome --screenshot="$ART/status-page.png" >/dev/null
  if [[ -s $ART/status-page.png ]]; then
    pass "status: screenshot saved" "$ART/status-page.png ($(stat -c %s "$ART/status-page.png") bytes)"
  else
    fail "status: screenshot saved" "no PNG; chromium log: $(tail -5 "$ART/chromium.log")"
  fi
  # Assertions on the rendered DOM (the page renders with JavaScript; a static copy of the HTML has no cards).
  out=$(python3 - "$ART/status-page.dom.html" "$UUID" "$NS" <<'PY'
import sys
from html.parser import HTMLParser
dom, uuid, ns = sys.argv[1], sys.argv[2], sys.argv[3]
class P(HTMLParser):
    def __init__(self):
        super().__init__(); self.stack = []; self.card = None; self.holders = []; self.memtext = ""; self.pending = {}
        self.in_mem = False; self.in_holder = 0; self.cells = []; self.cell = None; self.in_reason = None; self.depth_card = None
    def handle_starttag(self, tag, attrs):
        a = dict(attrs); cls = a.get("class", "").split()
        self.stack.append(tag)
        if "card" in cls and a.get("data-uuid") == uuid:
            self.card = a; self.depth_card = len(self.stack)
        if self.depth_card and "memtext" in cls: self.in_mem = True
        if self.depth_card and tag == "tr" and "holder" in cls: self.in_holder = len(self.stack); self.cells = []
        if self.in_holder and tag == "td": self.cell = ""
        if tag == "tr" and "pending-pod" in cls: self.cur_pending = a.get("data-pod"); self.pending[self.cur_pending] = {"attr": a.get("data-reason"), "text": ""}
        if tag == "td" and "reason" in cls and getattr(self, "cur_pending", None): self.in_reason = self.cur_pending
    def handle_endtag(self, tag):
        if self.in_holder and tag == "td" and self.cell is not None: self.cells.append(self.cell.strip()); self.cell = None
        if self.in_holder and tag == "tr" and len(self.stack) == self.in_holder: self.holders.append(self.cells); self.in_holder = 0
        if tag == "span": self.in_mem = False
        if tag == "td": self.in_reason = None
        if tag == "tr": self.cur_pending = None
        if self.depth_card and len(self.stack) == self.depth_card: self.depth_card = None
        if self.stack: self.stack.pop()
    def handle_data(self, d):
        if self.in_mem: self.memtext += d
        if self.cell is not None: self.cell += d
        if self.in_reason: self.pending[self.in_reason]["text"] += d
p = P(); p.feed(open(dom, encoding="utf-8").read())
ok = True
pods = sorted(h[1] for h in p.holders if h and h[0] == ns)
if p.card is None:
    print("FAIL card: no element .card[data-uuid=%s] in the rendered DOM" % uuid); sys.exit(1)
print("card data-pods=%s data-mem=%s memtext=%r holders=%s" % (p.card.get("data-pods"), p.card.get("data-mem"), p.memtext, pods))
if not (p.card.get("data-pods") == "3" and p.memtext.strip() == "60000 / 81920 MiB" and pods == ["share-1", "share-2", "share-3"]):
    print("FAIL card"); ok = False
for name, reason in (("share-4", "CardInsufficientCore"), ("big", "CardInsufficientMemory")):
    e = p.pending.get(ns + "/" + name)
    print("pending %s: %s" % (name, e))
    if not e or e["text"].strip() != reason: print("FAIL pending " + name); ok = False
sys.exit(0 if ok else 1)
PY
  )
  rc=$?
  if ((rc == 0)); then
    pass "status: the rendered page shows the A100 with three pods and 60000 / 81920 MiB, and the Pending reasons" \
      "$(tr '\n' ';' <<<"$out")"
  else
    fail "status: the rendered page shows the A100 with three pods and 60000 / 81920 MiB, and the Pending reasons" \
      "$(tr '\n' ';' <<<"$out") (DOM: $ART/status-page.dom.html)"
  fi
fi

section "gpuslice top and kubectl gpuslice top (API only)"
use_tenant a
check_top() {  # label output-file
  local f=$2 why=""
  grep -Eq "^$NODE +0 +NVIDIA A100[^ ]* +60000/81920 +\[#######\.\.\.\] +90/100 +" "$f" || why+="no CARDS row 60000/81920, 90/100; "
  for i in 1 2 3; do grep -Eq "^$NS +share-$i +cuda +$NODE +0 +20000 +30\$" "$f" || why+="no PODS row share-$i; "; done
  grep -Eq "^$NS +share-4 +CardInsufficientCore +1 GPU x 20000 MiB, 30% cores" "$f" || why+="no PENDING share-4 CardInsufficientCore; "
  grep -Eq "^$NS +big +CardInsufficientMemory +1 GPU x 90000 MiB" "$f" || why+="no PENDING big CardInsufficientMemory; "
  if [[ -z $why ]]; then pass "status: $1 shows the seed scenario" "$(grep -E "60000/81920|Insufficient" "$f" | tr -s ' ' | tr '\n' ';')"
  else fail "status: $1 shows the seed scenario" "$why(output: $f)"; fi
}
"$BIN" top >"$ART/top.txt" 2>&1
check_top "gpuslice top" "$ART/top.txt"
PLUGIN_DIR=$(mktemp -d /tmp/gpuslice-plugin.XXXXXX)
ln -s "$BIN" "$PLUGIN_DIR/kubectl-gpuslice"
PATH="$PLUGIN_DIR:$PATH" kubectl gpuslice top >"$ART/kubectl-gpuslice-top.txt" 2>&1
check_top "kubectl gpuslice top" "$ART/kubectl-gpuslice-top.txt"
rm -rf "$PLUGIN_DIR"
"$BIN" top -o wide >"$ART/top-wide.txt" 2>&1
if grep -q "$UUID" "$ART/top-wide.txt" && grep -q "0/1 nodes are available: 1 CardInsufficientMemory" "$ART/top-wide.txt"; then
  pass "status: gpuslice top -o wide adds UUIDs and the scheduler's message" "$(grep -c . "$ART/top-wide.txt") lines"
else
  fail "status: gpuslice top -o wide adds UUIDs and the scheduler's message" "$(head -c 1500 "$ART/top-wide.txt")"
fi
"$BIN" top -o json >"$ART/top.json" 2>&1
got=$(jq -r --arg u "$UUID" '.nodes.items[].cards[] | select(.uuid == $u) | "\(.memUsedMiB)/\(.memTotalMiB) \(.pods | length)"' "$ART/top.json" 2>&1)
[[ $got == "60000/81920 3" ]] && pass "status: gpuslice top -o json has the card" "$got" ||
  fail "status: gpuslice top -o json has the card" "got: $got"

section "metrics the dashboards query"
e2e_gpuslice_metrics a >"$ART/metrics.txt"
# tests/e2e/dashboard_check.py: every series a dashboard queries from gpuslice (HAMi's scheduler names and
# gpuslice's own), with the labels its matchers, by/on clauses, variables and legends use, on the live /metrics.
# HAMi's dashboards' vGPU-monitor and dcgm-exporter series are the node side's (tests/data/hami-dashboards).
for dash in "$E2E_ROOT/manifests/grafana/gpuslice-dashboard.json" \
  "$E2E_ROOT/tests/data/hami-dashboards/hami-vgpu-dashboard.queries.json" \
  "$E2E_ROOT/tests/data/hami-dashboards/k8s-vgpu-scheduler-dashboard.queries.json"; do
  title=$(jq -r '.title' "$dash")
  if out=$(python3 "$E2E_ROOT/tests/e2e/dashboard_check.py" --metrics "$ART/metrics.txt" "$dash" 2>&1); then
    pass "status: dashboard '$title' finds every series it queries from gpuslice on /metrics" "$(head -1 <<<"$out")"
  else
    fail "status: dashboard '$title' finds every series it queries from gpuslice on /metrics" "$(tr '\n' ';' <<<"$out")"
  fi
done
missing=""
for m in hami_gpu_memory_limit_bytes hami_gpu_core_limit_ratio hami_gpu_memory_allocated_bytes hami_gpu_shared_count \
  hami_gpu_core_allocated_ratio hami_node_gpu_overview hami_node_gpu_memory_allocated_ratio \
  hami_vgpu_memory_allocated_bytes hami_vgpu_core_allocated_ratio GPUDeviceMemoryAllocated GPUDeviceCoreAllocated \
  GPUDeviceMemoryLimit GPUDeviceCoreLimit GPUDeviceSharedNum nodeGPUOverview nodeGPUMemoryPercentage \
  vGPUMemoryAllocated vGPUCoreAllocated; do
  grep -Eq "^$m\{" "$ART/metrics.txt" || missing+="$m "
done
line=$(grep -E "^hami_vgpu_memory_allocated_bytes\{.*pod=\"share-1\"" "$ART/metrics.txt" | head -1)
if [[ -z $missing && $line == *namespace=\"$NS\"* && $line == *" 20971520000" ]]; then
  pass "status: HAMi v2.10's scheduler series (and legacy names) with HAMi's labels" "$line"
else
  fail "status: HAMi v2.10's scheduler series (and legacy names) with HAMi's labels" "missing: $missing; share-1: $line"
fi
# The loop publishes the view the scrape and the page read (scheduler/status_publisher.h); its age is on both.
age=$(awk '$1 == "gpuslice_scheduler_status_view_age_seconds" {print $2}' "$ART/metrics.txt")
jage=$(status_json "limit=1" | jq -r '.view.ageSeconds // empty')
if [[ -n $age && -n $jage ]] && awk -v a="$age" -v j="$jage" 'BEGIN { exit !(a >= 0 && a < 30 && j >= 0 && j < 30) }'; then
  pass "status: /metrics and /status.json say how old the published view is" "metrics ${age}s, status.json ${jage}s"
else
  fail "status: /metrics and /status.json say how old the published view is" "metrics '${age}', status.json '${jage}'"
fi

section "scheduler.hamiLegacyMetrics: false (tenant-a's gpuslice restarted with it, then restored)"
# The operator's switch at fleet scale (bench/RESULTS.md: 44 % less text): gpuslice reads it from its config file
# (the tenant's ConfigMap as lab.sh writes it). Without the legacy names HAMi's v2.10 dashboard must still find
# every scheduler series it queries.
CFG="$LAB_STATE/tenant-a/gpuslice-config.yaml"
cp "$CFG" "$ART/gpuslice-config.yaml.orig"
set_legacy() {  # true|false
  python3 - "$CFG" "$1" <<'PY'
import sys, yaml
path, value = sys.argv[1], sys.argv[2] == "true"
c = yaml.safe_load(open(path))
c.setdefault("scheduler", {})["hamiLegacyMetrics"] = value
open(path, "w").write("# Generated by lab/lab.sh; scheduler.hamiLegacyMetrics set by status_page_test.sh.\n" +
                      yaml.safe_dump(c, sort_keys=False))
PY
}
restart_gpuslice() { "$LAB" stop a gpuslice >/dev/null 2>&1; "$LAB" start a gpuslice >/dev/null 2>&1; }
modern_ready() { view_ready && e2e_gpuslice_metrics a | grep -q '^hami_gpu_memory_limit_bytes{'; }
set_legacy false && restart_gpuslice
if wait_for 60 modern_ready; then
  e2e_gpuslice_metrics a >"$ART/metrics-no-legacy.txt"
  legacy_left=$(grep -cE '^(GPUDevice[A-Za-z]+|nodeGPU[A-Za-z]+|vGPU(Memory|Core)Allocated)\{' "$ART/metrics-no-legacy.txt")
  modern=$(grep -cE '^hami_(gpu|node_gpu|vgpu)_[a-z_]+\{' "$ART/metrics-no-legacy.txt")
  before=$(grep -cE '^hami_(gpu|node_gpu|vgpu)_[a-z_]+\{' "$ART/metrics.txt")
  if ((legacy_left == 0 && modern == before && modern > 0)); then
    pass "status: with hamiLegacyMetrics: false no legacy name is on /metrics, HAMi v2.10's all are" \
      "$modern HAMi samples (as before), 0 legacy; $(stat -c %s "$ART/metrics.txt") -> $(stat -c %s "$ART/metrics-no-legacy.txt") bytes"
  else
    fail "status: with hamiLegacyMetrics: false no legacy name is on /metrics, HAMi v2.10's all are" \
      "legacy samples $legacy_left, HAMi samples $modern (before $before)"
  fi
  dash="$E2E_ROOT/tests/data/hami-dashboards/hami-vgpu-dashboard.queries.json"
  if out=$(python3 "$E2E_ROOT/tests/e2e/dashboard_check.py" --metrics "$ART/metrics-no-legacy.txt" "$dash" 2>&1); then
    pass "status: HAMi's v2.10 dashboard needs no legacy name" "$(head -1 <<<"$out")"
  else
    fail "status: HAMi's v2.10 dashboard needs no legacy name" "$(tr '\n' ';' <<<"$out")"
  fi
else
  fail "status: gpuslice restarted with hamiLegacyMetrics: false shows the scenario within 60 s" \
    "$(tail -3 "$LAB_STATE/logs/a-gpuslice.log" | tr '\n' ' ')"
fi
cp "$ART/gpuslice-config.yaml.orig" "$CFG" && restart_gpuslice
legacy_back() { view_ready && e2e_gpuslice_metrics a | grep -q '^GPUDeviceMemoryAllocated{'; }
if wait_for 60 legacy_back; then
  pass "status: tenant-a's gpuslice restored (legacy names back)" "$(grep -c hamiLegacyMetrics "$CFG") line(s) in $CFG"
else
  fail "status: tenant-a's gpuslice restored (legacy names back)" "$(tail -3 "$LAB_STATE/logs/a-gpuslice.log" | tr '\n' ' ')"
fi
