#!/usr/bin/env python3
"""The soak's summary and verdict (bench/soak_bench.sh): from soak_churn.py's CSV and summary, and the webhook
load client's output.

  soak_report.py --csv samples.csv --summary churn.json [--webhook-load webhook_load.out] [--window 600]

Windows: the first and the last --window seconds of the churn (shorter runs: a third of the run each).
Figures per series (VmRSS, open fds, threads, live webhook connections, pending pods, binds in flight): median
of the first and of the last window, and a least-squares slope per hour over the samples AFTER the first window
(the warm-up: allocator arenas, informer caches and connection pools grow to their working size there).

Verdict (the thresholds; a breach of any = FAIL):
  RSS      last-window median - first-window median > max(8 MiB, 10 %) of the first, or post-warm-up slope
           > max(8 MiB, 10 % of the first-window median) per hour
  fds      last - first median > 4, or slope > 10 fds per hour
  threads  last - first median != 0
  gauges   pending pods / binds in flight / live webhook connections: last-window median > first-window
           max + 2 x (rate x lifetime)/10 (a queue that does not drain)  [only if the series exists]
  pods     more than 1 % of the created pods deleted before a bind was seen, or any create/delete that failed
           after retries, or the webhook load client's errors > 0, or the gpuslice PID changed (a restart)
Prints Markdown (for bench/RESULTS.md) and the verdict on the last line; exit status 1 on FAIL.
"""
import argparse
import csv
import json
import re
import statistics
import sys


def num(x):
    try:
        return float(x)
    except (TypeError, ValueError):
        return None


def slope_per_hour(ts, ys):
    pts = [(t, y) for t, y in zip(ts, ys) if y is not None]
    if len(pts) < 3:
        return None
    mt = statistics.fmean(t for t, _ in pts)
    my = statistics.fmean(y for _, y in pts)
    den = sum((t - mt) ** 2 for t, _ in pts)
    if den == 0:
        return None
    return sum((t - mt) * (y - my) for t, y in pts) / den * 3600


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--csv", required=True)
    ap.add_argument("--summary", required=True)
    ap.add_argument("--webhook-load", default="")
    ap.add_argument("--binds", default="", help="soak_churn.py --binds: exact bind percentiles per span")
    ap.add_argument("--window", type=float, default=600)
    ap.add_argument("--duration", type=float, required=True, help="the churn's create phase (s)")
    ap.add_argument("--rate", type=float, default=20)
    ap.add_argument("--lifetime", type=float, default=10)
    a = ap.parse_args()
    rows = list(csv.DictReader(open(a.csv)))
    summ = json.load(open(a.summary))
    rows = [r for r in rows if num(r["t_s"]) is not None]
    # Steady part: from the first sample to the end of the creates (the tail and drain after it are not load).
    load_end = a.duration
    creating = [r for r in rows if num(r["t_s"]) <= load_end]
    span = max(num(r["t_s"]) for r in creating)
    win = min(a.window, span / 3)
    first = [r for r in creating if num(r["t_s"]) <= win]
    last = [r for r in creating if num(r["t_s"]) >= span - win]
    after = [r for r in creating if num(r["t_s"]) >= win]
    ts = [num(r["t_s"]) for r in after]

    def col(rs, c, scale=1.0):
        return [None if num(r.get(c)) is None else num(r.get(c)) * scale for r in rs]

    fails = []
    out = []
    out.append("| series | first %.0f min median | last %.0f min median | change | slope per hour after the first window |"
               % (win / 60, win / 60))
    out.append("|---|---|---|---|---|")
    series = [("VmRSS (MiB)", "rss_kb", 1 / 1024), ("VmHWM (MiB)", "hwm_kb", 1 / 1024), ("open fds", "fds", 1),
              ("threads", "threads", 1), ("live webhook connections", "m_webhook_open_connections", 1),
              ("pending pods (scheduler queue)", "m_scheduler_pending_pods", 1),
              ("binds in flight", "m_scheduler_binds_in_flight", 1),
              ("side effects in flight (events, condition patches)", "m_scheduler_side_effects_in_flight", 1),
              ("pods live (created, not deleted)", "live", 1), ("pods live and unbound", "unbound", 1)]
    figs = {}
    for label, c, sc in series:
        f, l = med(col(first, c, sc)), med(col(last, c, sc))
        if f is None and l is None:
            continue
        s = slope_per_hour(ts, col(after, c, sc))
        fmax = max((x for x in col(first, c, sc) if x is not None), default=None)
        figs[c] = (f, l, s, fmax)
        ch = "" if f is None or l is None else "%+.1f" % (l - f) + (" (%+.1f %%)" % ((l - f) / f * 100) if f else "")
        out.append("| %s | %s | %s | %s | %s |" % (label, "-" if f is None else "%.1f" % f, "-" if l is None else "%.1f" % l,
                                                   ch, "-" if s is None else "%+.2f" % s))
    f, l, s, _ = figs["rss_kb"]
    lim = max(8.0, 0.10 * f)
    if l - f > lim:
        fails.append("RSS grew %.1f MiB (> %.1f)" % (l - f, lim))
    if s is not None and s > lim:
        fails.append("RSS slope %.1f MiB/h (> %.1f)" % (s, lim))
    f, l, s, _ = figs["fds"]
    if l - f > 4:
        fails.append("fds grew %.0f (> 4)" % (l - f))
    if s is not None and s > 10:
        fails.append("fd slope %.1f/h (> 10)" % s)
    f, l, s, _ = figs["threads"]
    if l != f:
        fails.append("threads %g -> %g" % (f, l))
    bound_live = a.rate * a.lifetime
    for c in ("m_scheduler_pending_pods", "m_scheduler_binds_in_flight", "m_webhook_open_connections",
              "m_scheduler_side_effects_in_flight"):
        if c in figs and figs[c][1] is not None and figs[c][3] is not None:
            if figs[c][1] > figs[c][3] + 2 * bound_live / 10:
                fails.append("%s: last-window median %.0f > first-window max %.0f + %.0f" %
                             (c, figs[c][1], figs[c][3], 2 * bound_live / 10))
    pids = {r["pid"] for r in rows if r["pid"] not in ("", "-1")}
    if len(pids) > 1:
        fails.append("gpuslice restarted (pids %s)" % ", ".join(sorted(pids)))

    # Binds over time: per window of --window seconds (or a sixth of a short run).
    step = min(a.window, max(span / 6, 1))
    out.append("")
    out.append("| minutes | pods created | bound | deleted unbound | bind p50 (ms) | bind p99 (ms) | bind max (ms) | "
               "VmRSS (MiB) | fds | errors |")
    out.append("|---|---|---|---|---|---|---|---|---|---|")
    binds = []
    if a.binds:
        binds = [tuple(map(float, l.split(","))) for l in open(a.binds) if l.strip()]
    k = 0
    prev_err = 0
    while k * step < span:
        rs = [r for r in rows if k * step < num(r["t_s"]) <= (k + 1) * step]
        k += 1
        if not rs:
            continue
        # Interval percentiles are not additive: exact from --binds, else the medians of the samples' p50/p99.
        errs = int(num(rs[-1]["errors_total"]) or 0)
        lo, hi = (k - 1) * step, k * step
        bl = sorted(l for t, l in binds if lo < t <= hi)
        if bl:
            p50, p99, mx = (bl[min(len(bl) - 1, int(q * len(bl)))] for q in (0.5, 0.99, 1.0))
        else:
            p50, p99 = med(col(rs, "bind_p50_ms")), med(col(rs, "bind_p99_ms"))
            mx = max((x for x in col(rs, "bind_max_ms") if x is not None), default=None)
        fmt = "| %.1f-%.1f |" if step < 60 else "| %.0f-%.0f |"
        out.append((fmt + " %d | %d | %d | %s | %s | %s | %s | %s | %d |") % (
            (k - 1) * step / 60, min(k * step, span) / 60, sum(int(num(r["created"]) or 0) for r in rs),
            sum(int(num(r["bound"]) or 0) for r in rs), sum(int(num(r["deleted_unbound"]) or 0) for r in rs),
            "-" if p50 is None else "%.0f" % p50, "-" if p99 is None else "%.0f" % p99,
            "-" if mx is None else "%.0f" % mx,
            "%.1f" % med(col(rs, "rss_kb", 1 / 1024)), "%.0f" % med(col(rs, "fds")), errs - prev_err))
        prev_err = errs
    if not binds:
        out.append("(bind p50/p99 per row: the median of the %.0f s samples' own p50/p99 in that span)" %
                   (num(rows[1]["t_s"]) - num(rows[0]["t_s"]) if len(rows) > 1 else 0))
    out.append("")
    out.append("achieved create rate %.1f pods/s (asked %.0f/s; back-pressure holds creates while %s pods are "
               "live or the create workers are all busy)" % (summ["created"] / a.duration, a.rate,
                                                             summ.get("max_live", "too many")))
    first_r, last_r = rows[0], [r for r in rows if num(r["t_s"]) <= a.duration][-1]
    for c, label in (("m_webhook_reviews_total", "AdmissionReviews answered by gpuslice"),
                     ("m_kube_requests_total", "gpuslice's API requests")):
        if num(first_r.get(c)) is not None and num(last_r.get(c)) is not None:
            d = num(last_r[c]) - num(first_r[c])
            dt = num(last_r["t_s"]) - num(first_r["t_s"])
            out.append("- %s during the churn: %.0f (%.1f/s)" % (label, d, d / dt if dt else 0))
    out.append("pods: %d asked, %d created, %d bound (%s), %d deleted (%d before a bind was seen); create failures %d, "
               "delete failures %d; bind latency (POST sent -> watch sees spec.nodeName) over the run p50 %s ms, "
               "p99 %s ms, max %s ms; the churn's own watch was closed by the server and resumed %d times (relisted %s); "
               "creates at most %.2f s behind schedule" % (
                   summ["asked"], summ["created"], summ["bound"],
                   "%.2f %%" % (100 * summ["bound"] / summ["created"]) if summ["created"] else "-",
                   summ["deleted"], summ["deleted_unbound"], summ["create_err"], summ["delete_err"],
                   summ["bind_p50_ms"], summ["bind_p99_ms"], summ["bind_max_ms"], summ["watch_restarts"], summ.get("relists", "-"),
                   summ["create_behind_s"]))
    if summ["errors"]:
        out.append("errors: " + "; ".join("%s x%d" % kv for kv in sorted(summ["errors"].items())))
    if summ["created"] and summ["deleted_unbound"] > 0.01 * summ["created"]:
        fails.append("%d of %d pods deleted before bound (> 1 %%)" % (summ["deleted_unbound"], summ["created"]))
    if summ["create_err"] or summ["delete_err"]:
        fails.append("%d creates and %d deletes failed" % (summ["create_err"], summ["delete_err"]))
    last_row = rows[-1]
    for c, label in (("m_kube_requests_non2xx", "gpuslice's API requests answered non-2xx"),
                     ("m_scheduler_side_effects_dropped_total", "side effects dropped"),
                     ("m_watch_events_error", "watch ERROR events"),
                     ("m_kube_watch_starts", "gpuslice WATCH requests (informer watches opened)")):
        if num(last_row.get(c)) is not None:
            out.append("- %s at the end: %.0f" % (label, num(last_row.get(c))))
    if a.webhook_load:
        txt = open(a.webhook_load).read()
        m = re.search(r"requests=(\d+) errors=(\d+) reviews/s=(\d+)", txt)
        lat = re.search(r"latency ms: (.*)", txt)
        if m:
            out.append("- steady webhook load (webhook_load, fixed rate): %s reviews, %s errors, %s reviews/s; %s" %
                       (m.group(1), m.group(2), m.group(3), lat.group(1) if lat else ""))
            if int(m.group(2)):
                fails.append("webhook load: %s errors" % m.group(2))
        else:
            fails.append("webhook load client gave no result (%s)" % a.webhook_load)
    print("\n".join(out))
    verdict = "PASS" if not fails else "FAIL: " + "; ".join(fails)
    print("\nverdict: " + verdict)
    return 0 if not fails else 1


if __name__ == "__main__":
    sys.exit(main())
