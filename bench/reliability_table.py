#!/usr/bin/env python3
"""Renders the chaos tests' records (build/e2e-report/chaos.jsonl, one JSON line per fault run, written by
tests/e2e/chaos.sh's chaos_verdict) as the reliability table of bench/RESULTS.md (issue 14 item 6).

  bench/reliability_table.py [build/e2e-report/chaos.jsonl ...]

One row per fault (runs of the same fault are grouped: "3/3 CLEAN", the time to clean as min-max over the runs).
Columns: fault, the command that runs it, what was checked (the accountant's four questions plus the test's own
evidence), result, time to recover (the fault's own recovery figure when the test measured one, then the
accountant's seconds to a clean audit after the burst ended), the burst's figures of the last run.
"""
import json
import sys

CHECKED = ("no card over-committed (HAMi's count), no GPU pod lost (bound, Pending with a reason or deleted by "
           "its owner), no unbound pod holding an allocation, no node lock past its allocation")

# fault name (chaos_setup NAME) -> (what is injected, the command)
FAULTS = {
    "device-agent": ("device agent SIGKILLed while a burst pod holds a node lock, down 5 s",
                     "E2E_ONLY=chaos_device_agent tests/e2e/run.sh"),
    "lock-holder": ("device agent frozen, the pods holding node locks deleted by their owner",
                    "E2E_ONLY=chaos_lock_holder tests/e2e/run.sh"),
    "partition": ("gpuslice-to-API path cut (iptables DROP in the worker netns), restored",
                  "E2E_ONLY=chaos_partition tests/e2e/run.sh"),
    "konnectivity": ("Konnectivity agent stopped 2 s and restarted, four times",
                     "E2E_ONLY=chaos_konnectivity tests/e2e/run.sh"),
    "apiserver": ("kube-apiserver SIGKILLed mid-bind (a burst pod holds a node lock), restarted 3 s later",
                  "E2E_ONLY=chaos_apiserver tests/e2e/run.sh"),
    "compaction": ("path cut, etcd compacted at its head, kube-apiserver restarted, path restored: every watch 410",
                   "E2E_ONLY=chaos_compaction tests/e2e/run.sh"),
    "lease": ("two replicas, both cut from the API server 25 s (Lease 15 s), restored",
              "E2E_ONLY=chaos_lease tests/e2e/run.sh"),
}


def main(paths):
    runs = {}
    order = []
    for path in paths or ["build/e2e-report/chaos.jsonl"]:
        for line in open(path):
            line = line.strip()
            if not line:
                continue
            r = json.loads(line)
            f = r.get("fault", "?")
            if f not in runs:
                order.append(f)
            runs.setdefault(f, []).append(r)
    print("| fault | checked | result | time to recover | evidence (last run) | command |")
    print("|---|---|---|---|---|---|")
    for f in order:
        rs = runs[f]
        what, cmd = FAULTS.get(f, (f, "tests/e2e/chaos_%s_test.sh" % f))
        clean = sum(1 for r in rs if r.get("verdict") == "CLEAN")
        secs = [r["seconds_to_clean"] for r in rs if r.get("seconds_to_clean") is not None]
        rec = [r["recovery_ms"] for r in rs if r.get("recovery_ms")]
        parts = []
        if rec:
            parts.append("fault over after %s ms" % ("%d" % rec[0] if len(rec) == 1 else "%d-%d" % (min(rec), max(rec))))
        if secs:
            parts.append("clean audit %s s after the burst" %
                         ("%.1f" % secs[0] if len(secs) == 1 else "%.1f-%.1f" % (min(secs), max(secs))))
        last = rs[-1]
        fig = ("%d pods (%d bound, %d Pending with a reason, %d deleted by owner), %d locks left"
               % (last.get("pods", 0), last.get("bound", 0), last.get("pending_with_reason", 0),
                  last.get("owner_deleted", 0), last.get("locks_left", 0)))
        ev = "; ".join(x for x in (last.get("evidence", ""), fig, last.get("burst", "")) if x)
        print("| %s | %s | %d/%d CLEAN | %s | %s | `%s` |" % (what, CHECKED, clean, len(rs), "; ".join(parts) or "-",
                                                           ev.replace("|", "/").replace("\n", " "), cmd))


if __name__ == "__main__":
    main(sys.argv[1:])
