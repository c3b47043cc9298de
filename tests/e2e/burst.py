#!/usr/bin/env python3
"""A burst of GPU pod creates and deletes against one tenant's API server, for the chaos tests: what a busy
tenant does while a fault happens. Talks HTTPS to the API directly (one keep-alive connection per worker, the
kubeconfig's client certificate), so a few hundred pods cost little CPU; every request has a timeout and every
failure is counted, never fatal (the API server may be down for part of the run: that is the point).

  burst.py --kubeconfig F --namespace NS --rate 10 --seconds 40 --ledger L [--delete-fraction 0.3]
           [--node-selector key=value] [--scheduler-name NAME] [--mem 8000] [--cores 10] [--prefix b]

Each pod asks for one GPU slice (--mem MiB, --cores %), tolerates nothing special, and goes through the
webhook unless --scheduler-name is given. A created pod is written to the ledger as "created NS/NAME" once the
API answered 201 (or 409 AlreadyExists for a retried create); a fraction of them are deleted by their owner
(this program) a random 1-5 s later, written as "deleted NS/NAME" before the DELETE is sent, retried until 200
or 404. Prints a one-line summary: creates ok/refused/failed, deletes, API errors by kind, longest outage.
"""
import argparse
import json
import os
import queue
import random
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "lab"))
import kubeapi  # noqa: E402  (lab/kubeapi.py)


def pod_manifest(name, args):
    selector = dict([args.node_selector.split("=", 1)]) if args.node_selector else None
    return kubeapi.gpu_pod(name, args.mem, args.cores, labels={"gpuslice.io/burst": args.prefix},
                           image="nvidia/cuda:12.4.1-base-ubuntu22.04", command=["sleep", "infinity"],
                           node_selector=selector, scheduler_name=args.scheduler_name or None)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kubeconfig", required=True)
    ap.add_argument("--namespace", required=True)
    ap.add_argument("--rate", type=float, default=10)
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--ledger", required=True)
    ap.add_argument("--delete-fraction", type=float, default=0.3)
    ap.add_argument("--node-selector", default="")
    ap.add_argument("--scheduler-name", default="")
    ap.add_argument("--mem", type=int, default=8000)
    ap.add_argument("--cores", type=int, default=10)
    ap.add_argument("--prefix", default="b")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--seed", type=int, default=int(os.environ.get("E2E_SEED", "14")))
    args = ap.parse_args()
    rnd = random.Random(args.seed)
    host, port, sslctx = kubeapi.load_kubeconfig(args.kubeconfig)
    base = "/api/v1/namespaces/%s/pods" % args.namespace
    ledger = open(args.ledger, "a", buffering=1)
    lock = threading.Lock()
    stats = {"created": 0, "refused": 0, "failed": 0, "deleted": 0, "errors": {}}
    last_ok = [time.monotonic()]
    longest_outage = [0.0]

    def count_error(kind):
        with lock:
            stats["errors"][kind] = stats["errors"].get(kind, 0) + 1

    def saw_ok():
        now = time.monotonic()
        with lock:
            longest_outage[0] = max(longest_outage[0], now - last_ok[0])
            last_ok[0] = now

    creates = queue.Queue()
    deletes = []  # (due, name)
    stop = threading.Event()

    def creator():
        api = kubeapi.Api(host, port, sslctx)
        while True:
            name = creates.get()
            if name is None:
                return
            end = time.monotonic() + 20  # a create is retried through an outage for up to 20 s
            while True:
                status, data = api.request("POST", base, pod_manifest(name, args))
                if status in (201, 409):
                    saw_ok()
                    with lock:
                        stats["created"] += 1
                        ledger.write("created %s/%s\n" % (args.namespace, name))
                        if rnd.random() < args.delete_fraction:
                            deletes.append((time.monotonic() + rnd.uniform(1, 5), name))
                    break
                if status is not None and 400 <= status < 500 and status not in (408, 429):
                    saw_ok()  # the API answered: refused (e.g. the guard while the webhook is unreachable)
                    with lock:
                        stats["refused"] += 1
                        reason = json.loads(data or b"{}").get("reason", str(status)) if data[:1] == b"{" else status
                        stats["errors"]["refused %s" % reason] = stats["errors"].get("refused %s" % reason, 0) + 1
                    break
                count_error("transport" if status is None else "http %d" % status)
                if time.monotonic() > end:
                    with lock:
                        stats["failed"] += 1
                    break
                time.sleep(0.3)

    def deleter():
        api = kubeapi.Api(host, port, sslctx)
        while not stop.is_set() or deletes:
            now = time.monotonic()
            with lock:
                due = [d for d in deletes if d[0] <= now or stop.is_set()]
                for d in due:
                    deletes.remove(d)
            for _, name in due:
                with lock:
                    ledger.write("deleted %s/%s\n" % (args.namespace, name))
                end = time.monotonic() + 30
                while time.monotonic() < end:
                    status, _ = api.request("DELETE", base + "/" + name, {"gracePeriodSeconds": 0})
                    if status in (200, 202, 404):
                        saw_ok()
                        with lock:
                            stats["deleted"] += 1
                        break
                    count_error("transport" if status is None else "http %d" % status)
                    time.sleep(0.3)
            time.sleep(0.1)

    threads = [threading.Thread(target=creator) for _ in range(args.workers)]
    dthread = threading.Thread(target=deleter)
    for t in threads + [dthread]:
        t.start()
    t0 = time.monotonic()
    n = int(args.rate * args.seconds)
    for i in range(n):
        due = t0 + i / args.rate
        delay = due - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        creates.put("%s-%04d" % (args.prefix, i))
    for _ in threads:
        creates.put(None)
    for t in threads:
        t.join()
    stop.set()
    dthread.join()
    errors = ", ".join("%s %d" % kv for kv in sorted(stats["errors"].items())) or "none"
    print("burst: %d pods asked in %.0f s: %d created, %d refused, %d failed after retries, %d deleted by owner; "
          "API errors: %s; longest gap between API answers %.1f s"
          % (n, time.monotonic() - t0, stats["created"], stats["refused"], stats["failed"], stats["deleted"], errors,
             longest_outage[0]))


if __name__ == "__main__":
    main()
