#!/usr/bin/env python3
"""The soak's load and sampler (bench/soak_bench.sh): GPU pod create/delete churn through the API server (so the
mutating webhook sees every pod and the scheduler binds it), a watch that times every bind, and a sampler of the
gpuslice process (/proc) and of its /metrics, one CSV row per --sample-interval.

  soak_churn.py --kubeconfig F --namespace NS --rate 20 --duration 3600 --lifetime 10 --pid-file P
                --metrics-cmd 'ip netns exec g4-a curl -s http://127.0.0.1:8080/metrics'
                --csv samples.csv --summary churn.json [--sample-interval 10] [--workers 24]

Pod i (soak-<i>, asked for at t0 + i/rate) is created by POST (its creation is timed from the send); it is
deleted (grace 0) --lifetime seconds after its create returned, bound or not, so the cluster holds about
rate x lifetime pods. Bind latency = POST sent -> the watch's first event showing spec.nodeName (webhook,
scheduling, node lock and bind). Every request has a timeout; failures are counted, never fatal. Creates wait
while more than --max-live pods are live (deletes behind on a starved API server): the cluster stays bounded and
the achieved rate is what the CSV's created column shows.

Each CSV row: the interval's creates/binds/deletes and errors, the bind latency p50/p99/max of the binds seen in
the interval, the pods created and not deleted (live) and of those not bound (unbound), the process's VmRSS,
VmHWM, open fds (/proc/PID/fd), threads, its CPU seconds so far, and from /metrics the gauges and counters named
in METRICS (summed over label sets) plus every process_* series present.
"""
import argparse
import csv
import heapq
import http.client
import json
import os
import re
import shlex
import subprocess
import sys
import threading
import time
import queue

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lab"))
import kubeapi  # noqa: E402  (lab/kubeapi.py)

# Series read from gpuslice's /metrics (summed over their label sets); a name the build lacks is left empty.
METRICS = [
    "gpuslice_scheduler_pending_pods",
    "gpuslice_scheduler_pending_gpu_pods",
    "gpuslice_scheduler_binds_in_flight",
    "gpuslice_scheduler_preemptions_in_flight",
    "gpuslice_scheduler_side_effects_dropped_total",
    "gpuslice_scheduler_schedule_attempts_total",
    "gpuslice_scheduler_node_lock_operations_total",
    "gpuslice_webhook_open_connections",
    "gpuslice_webhook_connections_closed_total",
    "gpuslice_webhook_reviews_total",
    "gpuslice_webhook_http_requests_total",
    "gpuslice_kube_requests_total",
    "gpuslice_kube_watch_events_total",
    "gpuslice_scheduler_side_effects_in_flight",
]
# Labelled counters worth splitting: (column, series name, label regex that must match).
SPLIT = [
    ("kube_requests_non2xx", "gpuslice_kube_requests_total", r'code="(?!2)[^"]*"'),
    ("kube_watch_starts", "gpuslice_kube_requests_total", r'verb="WATCH"'),
    ("watch_events_error", "gpuslice_kube_watch_events_total", r'type="(ERROR|BOOKMARK_ERROR)"'),
    ("schedule_attempts_error", "gpuslice_scheduler_schedule_attempts_total", r'result="(error|unschedulable)"'),
]


def pod_manifest(name, args):
    return kubeapi.gpu_pod(name, args.mem, args.cores, labels={"gpuslice.io/soak": "1"}, container="c")


def pct(xs, q):
    if not xs:
        return ""
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def parse_metrics(text):
    out = {m: None for m in METRICS}
    split = {c: None for c, _, _ in SPLIT}
    procs = {}
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        m = re.match(r'([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)', line)
        if not m:
            continue
        name, labels, val = m.group(1), m.group(2) or "", m.group(3)
        try:
            v = float(val)
        except ValueError:
            continue
        if name in out:
            out[name] = (out[name] or 0) + v
        for col, sname, rx in SPLIT:
            if name == sname:
                split[col] = (split[col] or 0) + (v if re.search(rx, labels) else 0)
        if name.startswith("process_"):
            procs[name + labels] = procs.get(name + labels, 0) + v
    return out, split, procs


def proc_sample(pid):
    s = {"rss_kb": "", "hwm_kb": "", "threads": "", "fds": "", "cpu_s": ""}
    try:
        for line in open("/proc/%d/status" % pid):
            k, _, v = line.partition(":")
            if k == "VmRSS":
                s["rss_kb"] = int(v.split()[0])
            elif k == "VmHWM":
                s["hwm_kb"] = int(v.split()[0])
            elif k == "Threads":
                s["threads"] = int(v)
        s["fds"] = len(os.listdir("/proc/%d/fd" % pid))
        st = open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()
        s["cpu_s"] = round((int(st[11]) + int(st[12])) / os.sysconf("SC_CLK_TCK"), 2)
    except (OSError, ValueError, IndexError):
        pass
    return s


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kubeconfig", required=True)
    ap.add_argument("--namespace", required=True)
    ap.add_argument("--rate", type=float, default=20)
    ap.add_argument("--duration", type=float, default=3600)
    ap.add_argument("--lifetime", type=float, default=10)
    ap.add_argument("--mem", type=int, default=1000)
    ap.add_argument("--cores", type=int, default=5)
    ap.add_argument("--workers", type=int, default=24)
    ap.add_argument("--delete-workers", type=int, default=24)
    ap.add_argument("--sample-interval", type=float, default=10)
    ap.add_argument("--pid-file", required=True)
    ap.add_argument("--metrics-cmd", required=True)
    ap.add_argument("--csv", required=True)
    ap.add_argument("--summary", required=True)
    ap.add_argument("--binds", default="", help="one line per bind: seconds since the start, latency ms")
    ap.add_argument("--max-live", type=int, default=0,
                    help="creates wait while more pods than this are live (default 3 x rate x lifetime)")
    ap.add_argument("--tail", type=float, default=30, help="seconds after the last create: deletes finish, samples go on")
    args = ap.parse_args()

    max_live = args.max_live or int(3 * args.rate * args.lifetime)
    host, port, sslctx = kubeapi.load_kubeconfig(args.kubeconfig)
    base = "/api/v1/namespaces/%s/pods" % args.namespace
    lock = threading.Lock()
    sent = {}        # name -> monotonic time the POST was sent (until bound or deleted)
    created = set()  # created, not yet deleted
    bound = set()    # of created: bound
    iv = {"created": 0, "create_err": 0, "bound": 0, "deleted": 0, "delete_err": 0, "deleted_unbound": 0,
          "lat": []}
    tot = {"asked": 0, "created": 0, "create_err": 0, "bound": 0, "deleted": 0, "delete_err": 0,
           "deleted_unbound": 0, "watch_restarts": 0, "errors": {}, "create_behind_s": 0.0}
    all_lat = []
    creates = queue.Queue()
    deletes = []     # heap of (due, name)
    stop = threading.Event()
    done_creating = threading.Event()

    def err(kind):
        with lock:
            tot["errors"][kind] = tot["errors"].get(kind, 0) + 1

    def creator():
        api = kubeapi.Api(host, port, sslctx, timeout=15)
        while True:
            item = creates.get()
            if item is None:
                return
            name, due = item
            t = time.monotonic()
            with lock:
                sent[name] = t
                tot["create_behind_s"] = max(tot["create_behind_s"], t - due)
            status, data = api.request("POST", base, pod_manifest(name, args))
            with lock:
                if status in (201, 409):
                    created.add(name)
                    iv["created"] += 1
                    tot["created"] += 1
                else:
                    sent.pop(name, None)
                    iv["create_err"] += 1
                    tot["create_err"] += 1
                if status in (201, 409):  # lifetime from its creation (creates may run behind schedule)
                    heapq.heappush(deletes, (time.monotonic() + args.lifetime, name))
            if status not in (201, 409):
                reason = status
                if data[:1] == b"{":
                    try:
                        reason = "%s %s" % (status, json.loads(data).get("message", "")[:120])
                    except ValueError:
                        pass
                err("create %s" % (reason if status is not None else "transport"))

    def deleter():
        api = kubeapi.Api(host, port, sslctx, timeout=15)
        while True:
            with lock:
                item = None
                if deletes and (deletes[0][0] <= time.monotonic() or stop.is_set()):
                    item = heapq.heappop(deletes)
                empty = not deletes
            if item is None:
                if stop.is_set() and empty:
                    return
                time.sleep(0.05)
                continue
            name = item[1]
            ok = False
            for _ in range(5):
                status, _ = api.request("DELETE", base + "/" + name, {"gracePeriodSeconds": 0})
                if status in (200, 202, 404):
                    ok = True
                    break
                err("delete %s" % (status if status is not None else "transport"))
                time.sleep(0.3)
            with lock:
                created.discard(name)
                if name not in bound:
                    iv["deleted_unbound"] += 1
                    tot["deleted_unbound"] += 1
                bound.discard(name)
                sent.pop(name, None)
                key = "deleted" if ok else "delete_err"
                iv[key] += 1
                tot[key] += 1

    def saw_bound(name):
        t = time.monotonic()
        with lock:
            if name in bound or name not in sent:
                return
            bound.add(name)
            lat = t - sent[name]
            iv["bound"] += 1
            tot["bound"] += 1
            iv["lat"].append(lat)
            all_lat.append(lat)
            if binds_out:
                binds_out.write("%.2f,%.1f\n" % (t - t0, lat * 1000))

    def watcher():
        # An informer's way: list once, then watch from the last resourceVersion seen; relist only when the
        # server says 410 Gone (or a request fails). A starved kube-apiserver closes watches whose server-side
        # sender falls behind (every few seconds here): those are counted and resumed, not relisted.
        api = kubeapi.Api(host, port, sslctx, timeout=15)
        rv = None
        while not stop.is_set():
            if rv is None:
                status, data = api.request("GET", base + "?labelSelector=gpuslice.io%2Fsoak%3D1", timeout=30)
                if status != 200:
                    err("list %s" % status)
                    time.sleep(1)
                    continue
                lst = json.loads(data)
                for p in lst["items"]:
                    if p["spec"].get("nodeName"):
                        saw_bound(p["metadata"]["name"])
                rv = lst["metadata"]["resourceVersion"]
                with lock:
                    tot["relists"] = tot.get("relists", 0) + 1
            w_start, w_events, w_end = time.monotonic(), 0, "closed by the server"
            conn = http.client.HTTPSConnection(host, port, context=sslctx, timeout=60)
            try:
                conn.request("GET", base + "?watch=1&allowWatchBookmarks=true&timeoutSeconds=300"
                             "&labelSelector=gpuslice.io%2Fsoak%3D1&resourceVersion=" + rv)
                r = conn.getresponse()
                if r.status != 200:
                    err("watch http %d" % r.status)
                    rv = None
                while not stop.is_set() and rv is not None:
                    line = r.readline()
                    if not line:
                        break
                    ev = json.loads(line)
                    w_events += 1
                    o = ev["object"]
                    if ev["type"] == "ERROR":
                        if o.get("code") != 410:
                            err("watch ERROR %s" % o.get("code"))
                        w_end = "ERROR %s" % o.get("code")
                        rv = None
                        break
                    rv = o.get("metadata", {}).get("resourceVersion") or rv
                    if ev["type"] != "BOOKMARK" and o.get("spec", {}).get("nodeName"):
                        saw_bound(o["metadata"]["name"])
            except (OSError, http.client.HTTPException, ValueError) as e:
                err("watch %s" % type(e).__name__)
                w_end = "%s %s" % (type(e).__name__, e)
                rv = None
            finally:
                conn.close()
            if not stop.is_set():
                with lock:
                    tot["watch_restarts"] += 1
                if w_end != "closed by the server" or w_events == 0:
                    print("[soak %s] the churn's watch ended after %.0f s, %d events: %s"
                          % (time.strftime("%H:%M:%S"), time.monotonic() - w_start, w_events, w_end),
                          file=sys.stderr, flush=True)

    out = open(args.csv, "w", newline="")
    binds_out = open(args.binds, "w", buffering=1 << 16) if args.binds else None
    w = None
    t0 = time.monotonic()
    t0_unix = time.time()

    def sample():
        nonlocal w
        try:
            pid = int(open(args.pid_file).read().strip())
        except (OSError, ValueError):
            pid = -1
        ps = proc_sample(pid) if pid > 0 else proc_sample(0)
        try:
            text = subprocess.run(shlex.split(args.metrics_cmd), capture_output=True, text=True, timeout=10).stdout
        except subprocess.TimeoutExpired:
            text = ""
            err("metrics scrape timeout")
        mets, split, procs = parse_metrics(text)
        with lock:
            row = {"t_s": round(time.monotonic() - t0, 1), "unix": round(time.time(), 1), "pid": pid}
            row.update(ps)
            for k in ("created", "create_err", "bound", "deleted", "delete_err", "deleted_unbound"):
                row[k] = iv[k]
                iv[k] = 0
            lat, iv["lat"] = iv["lat"], []
            row["bind_p50_ms"] = round(pct(lat, 0.5) * 1000, 1) if lat else ""
            row["bind_p99_ms"] = round(pct(lat, 0.99) * 1000, 1) if lat else ""
            row["bind_max_ms"] = round(max(lat) * 1000, 1) if lat else ""
            row["live"] = len(created)
            row["unbound"] = len(created - bound)
            row["bound_total"] = tot["bound"]
            row["errors_total"] = sum(tot["errors"].values())
            row["watch_restarts"] = tot["watch_restarts"]
        for m in METRICS:
            row[m.replace("gpuslice_", "m_")] = "" if mets[m] is None else mets[m]
        for c in split:
            row["m_" + c] = "" if split[c] is None else split[c]
        for k in sorted(procs):
            row[k] = procs[k]
        if w is None:
            w = csv.DictWriter(out, fieldnames=list(row.keys()), extrasaction="ignore")
            w.writeheader()
        w.writerow(row)
        out.flush()
        print("[soak %s] t=%5.0fs rss=%s kB fds=%s thr=%s live=%s unbound=%s +%s bound p50=%s p99=%s ms errors=%s"
              % (time.strftime("%H:%M:%S"), row["t_s"], row["rss_kb"], row["fds"], row["threads"], row["live"],
                 row["unbound"], row["bound"], row["bind_p50_ms"], row["bind_p99_ms"], row["errors_total"]),
              file=sys.stderr, flush=True)

    threads = [threading.Thread(target=creator, daemon=True) for _ in range(args.workers)]
    dthreads = [threading.Thread(target=deleter, daemon=True) for _ in range(args.delete_workers)]
    wthread = threading.Thread(target=watcher, daemon=True)
    wthread.start()
    time.sleep(1)
    for t in threads + dthreads:
        t.start()

    def sampler():
        k = 0
        while not stop.is_set():
            k += 1
            nxt = t0 + k * args.sample_interval
            while time.monotonic() < nxt and not stop.is_set():
                time.sleep(min(0.2, max(0, nxt - time.monotonic())))
            sample()

    sthread = threading.Thread(target=sampler, daemon=True)
    sample()
    sthread.start()
    n = int(args.rate * args.duration)
    end = t0 + args.duration
    for i in range(n):
        due = t0 + i / args.rate
        d = due - time.monotonic()
        if d > 0:
            time.sleep(d)
        # Back-pressure: when creates or deletes fall behind (a starved API server) the cluster stays bounded and
        # the achieved create rate drops instead (the CSV's created column; create_behind_s the worst lag).
        while time.monotonic() < end:
            with lock:
                if len(created) < max_live and creates.qsize() < args.workers:
                    break
            time.sleep(0.02)
        if time.monotonic() >= end:
            break
        creates.put(("soak-%06d" % i, due))
        tot["asked"] += 1
    for _ in threads:
        creates.put(None)
    for t in threads:
        t.join()
    done_creating.set()
    time.sleep(args.tail)
    stop.set()  # deleters drain what is left (at once), the watch ends
    for t in dthreads:
        t.join()
    sthread.join(timeout=args.sample_interval + 15)
    sample()
    tot["duration_s"] = round(time.monotonic() - t0, 1)
    tot["max_live"] = max_live
    tot["t0_unix"] = t0_unix
    lat = sorted(all_lat)
    tot["bind_p50_ms"] = round(pct(lat, 0.5) * 1000, 1) if lat else None
    tot["bind_p99_ms"] = round(pct(lat, 0.99) * 1000, 1) if lat else None
    tot["bind_max_ms"] = round(lat[-1] * 1000, 1) if lat else None
    if binds_out:
        binds_out.close()
    json.dump(tot, open(args.summary, "w"), indent=1)
    print(json.dumps(tot), file=sys.stderr)


if __name__ == "__main__":
    main()
