#!/usr/bin/env python3
"""Pod watcher for bench/apiserver_bench.sh: timestamps, on this machine's wall clock, every pod event seen
through a real kube-apiserver watch, so binding throughput and freed-slice latency are measured from what the API
server serves (not from any scheduler's own logs).

  apiserver_watch.py watch   --kubeconfig F --namespace NS [--selector S] [--expect-bound N] [--timeout SEC]
      prints one line per event: "<unix seconds>\t<ADDED|MODIFIED|DELETED>\t<pod>\t<nodeName or ->\t<reason>"
      (reason: PodScheduled=False reason, or -) and exits 0 once N distinct pods were seen bound (N=0: never),
      1 on timeout.
  apiserver_watch.py throughput --events FILE --start UNIX --pods N
      prints "first last bound" stats as JSON from a watch file.
  apiserver_watch.py latency --events FILE --pairs victim:pending,...
      prints, per pair, DELETED(victim) -> first bound event of pending, in seconds, as JSON.
  apiserver_watch.py create --kubeconfig F --template FILE --count N [--threads T]
      creates N objects (Pods or Nodes) from a one-object YAML template, "@I@" in it replaced by 0..N-1, over T
      keep-alive connections in parallel (bench/scale_bench.sh: 40,000 pods in seconds, not kubectl's minutes).
  apiserver_watch.py delete-pods --kubeconfig F --namespace NS --selector S [--prefix P --count N [--threads T]]
      deletes P0..P<N-1> by name in parallel (grace 0), then whatever still matches S (DeleteCollection, grace 0)
      until none is left.

Only loopback API servers are used (the lab's); the kubeconfig's client certificate authenticates.
"""
import argparse
import http.client
import json
import os
import sys
import time
import urllib.parse

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lab"))
import kubeapi  # noqa: E402  (lab/kubeapi.py)
import yaml  # noqa: E402


def request(host, port, sslctx, path, timeout):
    conn = http.client.HTTPSConnection(host, port, context=sslctx, timeout=timeout)
    conn.request("GET", path, headers={"Accept": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        sys.exit("apiserver_watch.py: GET %s: %d %s" % (path, resp.status, resp.read(300)))
    return conn, resp


def call(conn_factory, conn, method, path, body=None):
    """One request on a keep-alive connection (reopened once if the server closed it); returns (conn, status, body)."""
    for attempt in range(2):
        try:
            conn.request(method, path, body=body,
                         headers={"Accept": "application/json", "Content-Type": "application/json"})
            resp = conn.getresponse()
            return conn, resp.status, resp.read()
        except (http.client.HTTPException, OSError):
            conn.close()
            conn = conn_factory()
            if attempt:
                raise
    raise AssertionError


def cmd_create(a):
    import concurrent.futures
    import threading
    host, port, sslctx = kubeapi.load_kubeconfig(a.kubeconfig)
    obj = yaml.safe_load(open(a.template))
    kind = obj["kind"]
    if kind == "Pod":
        path = "/api/v1/namespaces/%s/pods" % urllib.parse.quote(obj["metadata"]["namespace"])
    elif kind == "Node":
        path = "/api/v1/nodes"
    else:
        sys.exit("apiserver_watch.py create: Pods or Nodes, not %s" % kind)
    template = json.dumps(obj)
    if "@I@" not in template:
        sys.exit("apiserver_watch.py create: no @I@ in %s" % a.template)
    local = threading.local()
    factory = lambda: http.client.HTTPSConnection(host, port, context=sslctx, timeout=60)  # noqa: E731
    errors = []

    def one(i):
        body = template.replace("@I@", str(i)).encode()
        conn = getattr(local, "conn", None) or factory()
        for _ in range(20):
            conn, status, text = call(factory, conn, "POST", path, body)
            if status in (429, 500, 503, 504):  # overloaded: back off and retry the same object
                time.sleep(0.2)
                continue
            break
        local.conn = conn
        if status not in (201, 409):  # 409: exists (a retried create that did land)
            errors.append("%d %s" % (status, text[:200]))

    t0 = time.time()
    with concurrent.futures.ThreadPoolExecutor(a.threads) as pool:
        list(pool.map(one, range(a.count)))
    dt = time.time() - t0
    sys.stderr.write("created %d %ss in %.1f s (%.0f/s, %d threads)%s\n" %
                     (a.count - len(errors), kind, dt, a.count / dt if dt > 0 else 0, a.threads,
                      "; errors: %d, first: %s" % (len(errors), errors[0]) if errors else ""))
    return 1 if errors else 0


def cmd_delete_pods(a):
    host, port, sslctx = kubeapi.load_kubeconfig(a.kubeconfig)
    factory = lambda: http.client.HTTPSConnection(host, port, context=sslctx, timeout=120)  # noqa: E731
    base = "/api/v1/namespaces/%s/pods" % urllib.parse.quote(a.namespace)
    sel = urllib.parse.urlencode({"labelSelector": a.selector})
    t0 = time.time()
    if a.count:  # PREFIX0..PREFIX<count-1> in parallel first (DeleteCollection deletes one by one, server-side)
        import concurrent.futures
        import threading
        local = threading.local()
        body = json.dumps({"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0}).encode()

        def one(i):
            conn = getattr(local, "conn", None) or factory()
            for _ in range(20):
                conn, status, _text = call(factory, conn, "DELETE", "%s/%s%d" % (base, a.prefix, i), body)
                if status not in (429, 500, 503, 504):
                    break
                time.sleep(0.2)
            local.conn = conn

        with concurrent.futures.ThreadPoolExecutor(a.threads) as pool:
            list(pool.map(one, range(a.count)))
    conn = factory()
    while True:
        conn, status, text = call(factory, conn, "GET", base + "?limit=1&" + sel)
        if status == 200 and not json.loads(text).get("items"):
            break
        try:  # one request deletes the lot server-side; it may time out on a big collection: repeat
            conn, status, text = call(factory, conn, "DELETE", base + "?gracePeriodSeconds=0&" + sel)
        except (TimeoutError, OSError):
            conn = factory()
        if time.time() - t0 > a.timeout:
            sys.exit("apiserver_watch.py delete-pods: pods left after %.0f s" % a.timeout)
    sys.stderr.write("deleted the pods %s in %.1f s\n" % (a.selector, time.time() - t0))
    return 0


def scheduled_reason(pod):
    for c in pod.get("status", {}).get("conditions", []) or []:
        if c.get("type") == "PodScheduled" and c.get("status") == "False":
            return c.get("reason", "-") or "-"
    return "-"


def cmd_watch(a):
    host, port, sslctx = kubeapi.load_kubeconfig(a.kubeconfig)
    q = {"labelSelector": a.selector} if a.selector else {}
    base = "/api/v1/namespaces/%s/pods" % urllib.parse.quote(a.namespace)
    deadline = time.time() + a.timeout if a.timeout > 0 else None
    bound = set()
    out = sys.stdout

    def emit(kind, pod):
        name = pod["metadata"]["name"]
        node = pod.get("spec", {}).get("nodeName") or "-"
        out.write("%.6f\t%s\t%s\t%s\t%s\n" % (time.time(), kind, name, node, scheduled_reason(pod)))
        out.flush()
        if node != "-":
            bound.add(name)

    conn, resp = request(host, port, sslctx, base + "?" + urllib.parse.urlencode(dict(q, limit="0")), 60)
    lst = json.loads(resp.read())
    conn.close()
    for pod in lst.get("items", []):
        emit("LISTED", pod)
    rv = lst["metadata"]["resourceVersion"]
    if a.ready_file:  # listed: every later change is in the watch from this resourceVersion on
        open(a.ready_file, "w").write(rv + "\n")
    while True:
        if a.expect_bound and len(bound) >= a.expect_bound:
            return 0
        remaining = (deadline - time.time()) if deadline else 300
        if remaining <= 0:
            return 1
        params = dict(q, watch="1", resourceVersion=rv, allowWatchBookmarks="true",
                      timeoutSeconds=str(int(min(remaining, 300)) + 1))
        conn, resp = request(host, port, sslctx, base + "?" + urllib.parse.urlencode(params), min(remaining, 300) + 30)
        try:
            while True:
                if a.expect_bound and len(bound) >= a.expect_bound:
                    return 0
                if deadline and time.time() > deadline:
                    return 1
                line = resp.readline()
                if not line:
                    break
                ev = json.loads(line)
                obj = ev.get("object", {})
                if ev.get("type") == "ERROR":
                    if obj.get("code") == 410:  # expired: relist from now (events in between are lost; rare)
                        return cmd_watch(a)
                    sys.exit("apiserver_watch.py: watch ERROR %s" % obj)
                rv = obj.get("metadata", {}).get("resourceVersion", rv)
                if ev.get("type") in ("ADDED", "MODIFIED", "DELETED"):
                    emit(ev["type"], obj)
        except (TimeoutError, OSError):
            pass
        finally:
            conn.close()


def read_events(path):
    rows = []
    for line in open(path):
        parts = line.rstrip("\n").split("\t")
        if len(parts) >= 4:
            rows.append((float(parts[0]), parts[1], parts[2], parts[3]))
    return rows


def cmd_throughput(a):
    first_bound = {}
    for t, kind, name, node in read_events(a.events):
        if node != "-" and kind != "DELETED" and name not in first_bound:
            first_bound[name] = t
    times = sorted(first_bound.values())
    res = {"bound": len(times), "pods": a.pods}
    if times:
        # Pods already bound when the watch listed them count at the start time.
        times = [max(t, a.start) for t in times]
        res.update(first=times[0] - a.start, last=times[-1] - a.start)
        res["start_to_all_s"] = times[-1] - a.start
        res["first_to_last_s"] = times[-1] - times[0]
        res["pods_per_s_start"] = len(times) / res["start_to_all_s"] if res["start_to_all_s"] > 0 else None
        res["pods_per_s_steady"] = ((len(times) - 1) / res["first_to_last_s"]) if res["first_to_last_s"] > 0 else None
        # The middle 80 % of the binds (10th to 90th percentile): the steady rate without start-up and tail.
        lo, hi = len(times) // 10, (9 * len(times)) // 10
        if hi > lo and times[hi - 1] > times[lo]:
            res["pods_per_s_mid80"] = (hi - 1 - lo) / (times[hi - 1] - times[lo])
    print(json.dumps(res))


def cmd_latency(a):
    rows = read_events(a.events)
    out = []
    for pair in a.pairs.split(","):
        victim, pending = pair.split(":")
        t_del = next((t for t, k, n, _ in rows if k == "DELETED" and n == victim), None)
        t_bound = next((t for t, k, n, node in rows if n == pending and node != "-" and k != "DELETED"), None)
        out.append({"victim": victim, "pending": pending,
                    "latency_s": (t_bound - t_del) if (t_del is not None and t_bound is not None) else None})
    print(json.dumps(out))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("watch")
    w.add_argument("--kubeconfig", required=True)
    w.add_argument("--namespace", required=True)
    w.add_argument("--selector", default="")
    w.add_argument("--expect-bound", type=int, default=0)
    w.add_argument("--timeout", type=float, default=0)
    w.add_argument("--ready-file", default="", help="written once the initial list is done")
    t = sub.add_parser("throughput")
    t.add_argument("--events", required=True)
    t.add_argument("--start", type=float, required=True)
    t.add_argument("--pods", type=int, required=True)
    lat = sub.add_parser("latency")
    lat.add_argument("--events", required=True)
    lat.add_argument("--pairs", required=True)
    c = sub.add_parser("create")
    c.add_argument("--kubeconfig", required=True)
    c.add_argument("--template", required=True)
    c.add_argument("--count", type=int, required=True)
    c.add_argument("--threads", type=int, default=16)
    d = sub.add_parser("delete-pods")
    d.add_argument("--kubeconfig", required=True)
    d.add_argument("--namespace", required=True)
    d.add_argument("--selector", required=True)
    d.add_argument("--timeout", type=float, default=900)
    d.add_argument("--prefix", default="", help="with --count: delete PREFIX0.. by name in parallel first")
    d.add_argument("--count", type=int, default=0)
    d.add_argument("--threads", type=int, default=16)
    a = p.parse_args()
    return {"watch": cmd_watch, "throughput": cmd_throughput, "latency": cmd_latency, "create": cmd_create,
            "delete-pods": cmd_delete_pods}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main() or 0)
