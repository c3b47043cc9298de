#!/usr/bin/env bash
# Issue 14 chaos: etcd compaction forcing 410 Gone on every watch, under a burst. gpuslice's path to the API is cut
# (its watches end), etcd is compacted at its current revision, and kube-apiserver is restarted so its watch cache
# holds nothing older either; when the path comes back every gpuslice watch resumes from a resourceVersion the
# server no longer has and must be answered 410 (gpuslice_kube_requests_total{verb="WATCH",code="gone"|"410"}
# grows), relist, and lose nothing. Ends with the accountant.
set -uo pipefail
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/chaos.sh"
trap 'cut_restore; chaos_cleanup' EXIT
ETCD=$(source "$LAB_STATE/lab.env"; echo "http://127.0.0.1:$ETCD_PORT")
# Watches that ended in 410 Gone: an ERROR event in the stream (the API server's watch cache answers "too old
# resource version" so) or a 410 status on the WATCH request itself.
gone_watches() {
  e2e_gpuslice_metrics a | awk '/^gpuslice_kube_watch_events_total\{type="ERROR"\}/ {n += $NF}
    /^gpuslice_kube_requests_total\{/ && /code="410"/ {n += $NF} END {print n + 0}'
}
etcd_revision() { curl -sf -X POST "$ETCD/v3/kv/range" -d '{"key":"AA=="}' | jq -r '.header.revision'; }

section "chaos: etcd compaction, every watch answered 410 (tenant-a)"
chaos_setup compaction || exit 1
gone_before=$(gone_watches)
chaos_burst_start
chaos_wait_created 15 30 || { fail "compaction: burst started" "$(cat "$CHAOS_BURST_OUT")"; exit 1; }
cut_on || { fail "compaction: cut gpuslice's path to the API (iptables in $(netns_of a))" "iptables failed"; exit 1; }
sleep 2
rev=$(etcd_revision)
compacted=$(curl -sf -X POST "$ETCD/v3/kv/compaction" -d "{\"revision\":\"$rev\",\"physical\":true}" >/dev/null && echo yes || echo no)
restart_host_proc a-apiserver TERM 0 >/dev/null
wait_for 90 api_ready || { fail "compaction: API back after the restart" "not ready after 90 s"; exit 1; }
cut_restore
t_restore=$(now_ms)
got_410() { (($(gone_watches) > gone_before)); }
wait_for 60 got_410
gone_after=$(gone_watches)
if [[ $compacted == yes ]] && ((gone_after > gone_before)); then
  pass "compaction: etcd compacted at revision $rev, gpuslice's watches answered 410 and relisted" \
    "watches ended with 410: $gone_before -> $gone_after"
else
  fail "compaction: etcd compacted at revision $rev, gpuslice's watches answered 410 and relisted" \
    "compacted=$compacted, WATCH gone/410 count $gone_before -> $gone_after"
fi
chaos_probe "$t_restore"
CHAOS_EVIDENCE="compacted at revision $rev; $((gone_after - gone_before)) gpuslice watches answered 410"
chaos_verdict
