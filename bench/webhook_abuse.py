#!/usr/bin/env python3
"""Webhook abuse from the tenant's side (issue 14 item 3), against a running `gpuslice serve` on 127.0.0.1.

While a steady load runs (REVIEW_RATE reviews/s, each on a NEW TLS connection as the API server through the
Konnectivity agent may make them, and PROBE_RATE GET /readyz/s on the health port as kubelet), each abuse case
is applied in turn; for each case the script records the answer the abuser got and, for the real traffic started
during the case (and 2 s after it), how many reviews/probes failed and their p50/p99 latency. Also the server's
VmRSS (sampled every 20 ms) and, for the idle floods, when each connection was closed.

A real review fails when it is not answered 200 with a patch within 5 s (the webhook's timeoutSeconds); a probe
fails when it is not answered 200 within 1 s (kubelet's default timeoutSeconds).

  bench/webhook_abuse.py --port P --health-port H --ca ca.crt --body review.json --pid PID [--cases a,b] [--json F]
Run by bench/webhook_abuse.sh, which builds and starts the server.
"""
import argparse
import concurrent.futures as cf
import json
import os
import selectors
import socket
import ssl
import statistics
import subprocess
import threading
import time

ARGS = None
SAMPLES = []  # (t0, kind, ok, latency_s, error)
SAMPLES_LOCK = threading.Lock()
STOP = threading.Event()


def tls_context():
    ctx = ssl.create_default_context(cafile=ARGS.ca)
    ctx.check_hostname = True
    return ctx


def read_response(sock, deadline):
    """One HTTP/1.1 response (Content-Length framed) -> (status, headers, body, rest)."""
    data = b""
    while b"\r\n\r\n" not in data:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed before a response: %r" % data[:80])
        data += chunk
    head, rest = data.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ")[1])
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    n = int(headers.get("content-length", "0"))
    while len(rest) < n:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        chunk = sock.recv(65536)
        if not chunk:
            break
        rest += chunk
    return status, headers, rest[:n], rest[n:]


def review_request(body, uid=None, extra_headers="", keep_alive=False):
    if uid is not None:
        doc = json.loads(body)
        doc["request"]["uid"] = uid
        body = json.dumps(doc).encode()
    return (b"POST /mutate HTTP/1.1\r\nHost: gpuslice\r\nContent-Type: application/json\r\n" +
            (b"" if keep_alive else b"Connection: close\r\n") + extra_headers.encode() +
            b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)


def tls_connect(timeout):
    raw = socket.create_connection(("127.0.0.1", ARGS.port), timeout=timeout)
    return tls_context().wrap_socket(raw, server_hostname="127.0.0.1")


def real_review(body):
    t0 = time.monotonic()
    deadline = t0 + 5.0
    try:
        with tls_connect(5.0) as s:
            s.sendall(review_request(body))
            status, _, resp, _ = read_response(s, deadline)
        ok = status == 200 and b'"patch"' in resp
        err = "" if ok else "status %d" % status
    except Exception as e:  # noqa: BLE001 - every failure counts
        ok, err = False, type(e).__name__ + ": " + str(e)[:80]
    record(t0, "review", ok, time.monotonic() - t0, err)


def probe():
    t0 = time.monotonic()
    try:
        with socket.create_connection(("127.0.0.1", ARGS.health_port), timeout=1.0) as s:
            s.sendall(b"GET /readyz HTTP/1.1\r\nHost: gpuslice\r\nConnection: close\r\n\r\n")
            status, _, resp, _ = read_response(s, t0 + 1.0)
        ok = status == 200 and resp.strip() == b"ok"
        err = "" if ok else "status %d" % status
    except Exception as e:  # noqa: BLE001
        ok, err = False, type(e).__name__ + ": " + str(e)[:80]
    record(t0, "probe", ok, time.monotonic() - t0, err)


def record(t0, kind, ok, latency, err):
    with SAMPLES_LOCK:
        SAMPLES.append((t0, kind, ok, latency, err))


def steady(pool, fn, rate, *a):
    period = 1.0 / rate
    nxt = time.monotonic()
    while not STOP.is_set():
        pool.submit(fn, *a)
        nxt += period
        time.sleep(max(0.0, nxt - time.monotonic()))


class RssSampler:
    def __init__(self, pid):
        self.pid, self.peak, self.lock = pid, 0, threading.Lock()
        threading.Thread(target=self.run, daemon=True).start()

    def rss_kib(self):
        with open("/proc/%d/status" % self.pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0

    def run(self):
        while not STOP.is_set():
            v = self.rss_kib()
            with self.lock:
                self.peak = max(self.peak, v)
            time.sleep(0.02)

    def reset(self):
        with self.lock:
            self.peak = self.rss_kib()
            return self.peak


def pct(values, p):
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100.0 * (len(values) - 1))))]


def window_stats(t_from, t_to):
    with SAMPLES_LOCK:
        got = [s for s in SAMPLES if t_from <= s[0] < t_to]
    out = {}
    for kind in ("review", "probe"):
        ks = [s for s in got if s[1] == kind]
        lat = [s[3] * 1000 for s in ks if s[2]]
        errs = sorted({s[4] for s in ks if not s[2]})
        out[kind] = {"n": len(ks), "failed": sum(1 for s in ks if not s[2]),
                     "p50_ms": round(pct(lat, 50), 1), "p99_ms": round(pct(lat, 99), 1), "errors": errs[:3]}
    return out


# ---------------------------------------------------------------------------------------------------------
# Abuse cases: each returns a dict of what the abuser saw.

def idle_flood(n, sources):
    """n TCP connections that send nothing, from 127.0.0.2.. (`sources` addresses); when each is closed."""
    sel = selectors.DefaultSelector()
    opened, closed, failed = {}, {}, 0
    t0 = time.monotonic()
    socks = []
    for i in range(n):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        try:
            s.bind(("127.0.0.%d" % (2 + i % sources), 0))
            s.connect_ex(("127.0.0.1", ARGS.port))
        except OSError:
            failed += 1
            s.close()
            continue
        socks.append(s)
        opened[s.fileno()] = time.monotonic()
        sel.register(s, selectors.EVENT_READ)
    connect_s = time.monotonic() - t0
    end = time.monotonic() + 30
    while len(closed) < len(socks) and time.monotonic() < end:
        for key, _ in sel.select(timeout=0.5):
            s = key.fileobj
            try:
                data = s.recv(1)
            except OSError:
                data = b""
            if not data:
                closed[s.fileno()] = time.monotonic()
                sel.unregister(s)
    lifetimes = sorted(closed[fd] - opened[fd] for fd in closed)
    for s in socks:
        s.close()
    return {"connections": len(socks), "connect_errors": failed, "opened_in_s": round(connect_s, 2),
            "closed": len(closed), "still_open_after_30s": len(socks) - len(closed),
            "closed_median_s": round(pct(lifetimes, 50), 2), "closed_p99_s": round(pct(lifetimes, 99), 2),
            "closed_last_s": round(lifetimes[-1], 2) if lifetimes else None}


def slowloris(what, conns=50, interval=1.0):
    """`conns` TLS connections trickling a request one byte per `interval`: headers, or a body."""
    body = open(ARGS.body, "rb").read()

    def one(_):
        try:
            s = tls_connect(5.0)
        except Exception as e:  # noqa: BLE001
            return ("connect failed: " + type(e).__name__, 0.0)
        if what == "headers":
            prefix, trickle = b"POST /mutate HTTP/1.1\r\nHost: x\r\n", b"X-Slow: " + b"a" * 10000
        else:
            prefix = (b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n")
            trickle = body
        t0 = time.monotonic()
        try:
            s.sendall(prefix)
            for i in range(len(trickle)):
                s.settimeout(interval)
                try:
                    if s.recv(1) == b"":
                        break
                    return ("answered", time.monotonic() - t0)
                except socket.timeout:
                    pass
                s.sendall(trickle[i:i + 1])
        except Exception:  # noqa: BLE001 - closed under us: that is the point
            pass
        finally:
            s.close()
        return ("closed", time.monotonic() - t0)

    with cf.ThreadPoolExecutor(conns) as pool:
        res = list(pool.map(one, range(conns)))
    times = sorted(t for r, t in res if r == "closed")
    return {"connections": conns, "closed": len(times), "other": sorted({r for r, _ in res if r != "closed"}),
            "closed_min_s": round(times[0], 1) if times else None,
            "closed_max_s": round(times[-1], 1) if times else None}


def one_tls_exchange(payload, timeout=10.0, responses=1):
    s = tls_connect(timeout)
    deadline = time.monotonic() + timeout
    out, rest = [], b""
    try:
        s.sendall(payload)
        for _ in range(responses):
            status, headers, body, rest = read_response(_Prefixed(s, rest), deadline)
            out.append((status, headers, body))
    finally:
        s.close()
    return out


class _Prefixed:
    """A socket whose first recv() returns bytes already read (pipelined responses)."""

    def __init__(self, sock, prefix):
        self.sock, self.prefix = sock, prefix

    def settimeout(self, t):
        self.sock.settimeout(t)

    def recv(self, n):
        if self.prefix:
            p, self.prefix = self.prefix, b""
            return p
        return self.sock.recv(n)


def summarize(status, body):
    text = body.decode("utf-8", "replace").strip().replace("\n", " ")
    if text.startswith(str(status) + " "):
        text = text[len(str(status)) + 1:]
    if text.startswith("{"):
        try:
            r = json.loads(text)["response"]
            text = "uid %s, allowed %s, %s" % (r.get("uid"), r.get("allowed"),
                                                "patch" if "patch" in r else "no patch")
        except (ValueError, KeyError):
            pass
    return "%d: %s" % (status, text[:110])


def case_oversized_headers():
    body = open(ARGS.body, "rb").read()
    r = one_tls_exchange(review_request(body, extra_headers="X-Padding: " + "h" * 20000 + "\r\n"))
    return {"answer": summarize(r[0][0], r[0][2])}


def case_oversized_body():
    big = b'{"pad":"' + b"x" * (5 * 1024 * 1024) + b'"}'
    r = one_tls_exchange(b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
                         str(len(big)).encode() + b"\r\n\r\n" + big)
    return {"answer": summarize(r[0][0], r[0][2])}


def case_pipelined():
    body = open(ARGS.body, "rb").read()
    uids = ["pipe-1", "pipe-2", "pipe-3"]
    payload = b"".join(review_request(body, uid=u, keep_alive=True) for u in uids[:-1])
    payload += review_request(body, uid=uids[-1])
    r = one_tls_exchange(payload, responses=3)
    got = [json.loads(b)["response"]["uid"] for _, _, b in r]
    return {"answer": "%s, uids in order: %s" % ([s for s, _, _ in r], got == uids)}


def case_malformed_http():
    out = []
    for raw in (b"GET /readyz HTTP/1.1\r\nHost x\r\n\r\n", b"POST /mutate HTTP/9.9\r\nHost: x\r\n\r\n",
                b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!"):
        try:
            r = one_tls_exchange(raw)
            out.append(summarize(r[0][0], r[0][2]))
        except Exception as e:  # noqa: BLE001
            out.append("closed: " + type(e).__name__)
    return {"answer": " / ".join(out)}


def case_plain_http():
    with socket.create_connection(("127.0.0.1", ARGS.port), timeout=5) as s:
        s.sendall(b"GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n")
        status, _, body, _ = read_response(s, time.monotonic() + 5)
    return {"answer": summarize(status, body)}


def s_client(flags, stdin=b"", wait=0.0):
    cmd = ["openssl", "s_client", "-connect", "127.0.0.1:%d" % ARGS.port, "-CAfile", ARGS.ca] + flags
    p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        if wait:
            time.sleep(wait)
        out, _ = p.communicate(stdin, timeout=15)
    except subprocess.TimeoutExpired:
        p.kill()
        out, _ = p.communicate()
    return out.decode("utf-8", "replace")


def case_old_tls():
    res = []
    for flag in ("-tls1", "-tls1_1"):
        out = s_client([flag, "-cipher", "DEFAULT@SECLEVEL=0"])
        alert = [line for line in out.splitlines() if "alert" in line]
        cipher = [line.strip() for line in out.splitlines() if "Cipher is" in line]
        res.append("%s: %s, %s" % (flag, alert[0].split(":")[-1].strip() if alert else "no alert",
                                   cipher[0] if cipher else "no cipher line"))
    return {"answer": " / ".join(res)}


def case_renegotiation():
    # s_client renegotiates when it reads a line "R"; the server (SSL_OP_NO_RENEGOTIATION) refuses it.
    p = subprocess.Popen(["openssl", "s_client", "-connect", "127.0.0.1:%d" % ARGS.port, "-CAfile", ARGS.ca,
                          "-tls1_2"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    time.sleep(1.0)
    p.stdin.write(b"R\n")
    p.stdin.flush()
    time.sleep(1.0)
    try:
        out, _ = p.communicate(b"", timeout=10)
    except subprocess.TimeoutExpired:
        p.kill()
        out, _ = p.communicate()
    out = out.decode("utf-8", "replace")
    lines = [line.strip() for line in out.splitlines() if "RENEGOTIATING" in line or "alert" in line or
             "renegotiation" in line.lower()]
    return {"answer": "; ".join(lines)[:200] or out.splitlines()[-1:]}


def review_with(obj_text=None, mutate=None, raw=None):
    body = open(ARGS.body, "rb").read()
    if raw is None:
        doc = json.loads(body)
        if mutate:
            mutate(doc)
        raw = json.dumps(doc).encode()
        if obj_text is not None:
            raw = raw.replace(b'"__OBJECT__"', obj_text)
    r = one_tls_exchange(b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         b"Connection: close\r\nContent-Length: " + str(len(raw)).encode() + b"\r\n\r\n" + raw)
    return r[0]


def case_deep_json():
    depth = 200000
    status, _, body = review_with(obj_text=b"[" * depth + b"]" * depth,
                                  mutate=lambda d: d["request"].__setitem__("object", "__OBJECT__"))
    return {"answer": summarize(status, body), "depth": depth}


def case_invalid_utf8():
    body = open(ARGS.body, "rb").read()
    raw = body.replace(b'"namespace":', b'"x-bad":"\xff\xfe\xc3",' + b'"namespace":', 1)
    status, _, resp = review_with(raw=raw)
    return {"answer": summarize(status, resp)}


def case_duplicate_keys():
    body = open(ARGS.body, "rb").read()
    doc = json.loads(body)
    first = dict(doc["request"], uid="dup-first")
    second = dict(doc["request"], uid="dup-second")
    raw = ('{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":%s,"request":%s}' %
           (json.dumps(first), json.dumps(second))).encode()
    status, _, resp = review_with(raw=raw)
    return {"answer": summarize(status, resp)}


def case_other_kind():
    def to_deployment(d):
        r = d["request"]
        r["kind"] = {"group": "apps", "version": "v1", "kind": "Deployment"}
        r["resource"] = {"group": "apps", "version": "v1", "resource": "deployments"}
        r["object"] = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
                       "spec": {"template": r["object"]}}
    status, _, body = review_with(mutate=to_deployment)
    return {"answer": summarize(status, body)}


CASES = {
    "idle10k_many_sources": lambda: idle_flood(ARGS.idle, ARGS.sources),
    "idle10k_one_source": lambda: idle_flood(ARGS.idle, 1),
    "slowloris_headers": lambda: slowloris("headers"),
    "slowloris_body": lambda: slowloris("body"),
    "oversized_headers": case_oversized_headers,
    "oversized_body": case_oversized_body,
    "pipelined": case_pipelined,
    "malformed_http": case_malformed_http,
    "plain_http_on_tls": case_plain_http,
    "tls_1_0_1_1": case_old_tls,
    "renegotiation": case_renegotiation,
    "deep_json": case_deep_json,
    "invalid_utf8": case_invalid_utf8,
    "duplicate_keys": case_duplicate_keys,
    "other_kind": case_other_kind,
}


def main():
    global ARGS
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--health-port", type=int, required=True)
    ap.add_argument("--ca", required=True)
    ap.add_argument("--body", required=True)
    ap.add_argument("--pid", type=int, required=True)
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--idle", type=int, default=10000)
    ap.add_argument("--sources", type=int, default=100)
    ap.add_argument("--review-rate", type=float, default=20)
    ap.add_argument("--probe-rate", type=float, default=10)
    ap.add_argument("--baseline", type=float, default=10)
    ap.add_argument("--json")
    ARGS = ap.parse_args()
    review_body = open(ARGS.body, "rb").read()
    rss = RssSampler(ARGS.pid)
    pool = cf.ThreadPoolExecutor(max_workers=64)
    threading.Thread(target=steady, args=(pool, real_review, ARGS.review_rate, review_body), daemon=True).start()
    threading.Thread(target=steady, args=(pool, probe, ARGS.probe_rate), daemon=True).start()
    results = []
    t = time.monotonic()
    rss0 = rss.reset()
    time.sleep(ARGS.baseline)
    results.append({"case": "baseline (no abuse)", "seen": {}, "rss_kib": [rss0, rss.peak],
                    "real": window_stats(t, time.monotonic())})
    print(json.dumps(results[-1]), flush=True)
    for name in ARGS.cases.split(","):
        rss_before = rss.reset()
        t0 = time.monotonic()
        try:
            seen = CASES[name]()
        except Exception as e:  # noqa: BLE001 - a case that breaks is a result too
            seen = {"error": type(e).__name__ + ": " + str(e)[:160]}
        took = time.monotonic() - t0
        time.sleep(2.0)
        rss_after = rss.rss_kib()
        results.append({"case": name, "seconds": round(took, 1), "seen": seen,
                        "rss_kib": [rss_before, rss.peak, rss_after],
                        "real": window_stats(t0, time.monotonic())})
        print(json.dumps(results[-1]), flush=True)
    STOP.set()
    pool.shutdown(wait=True)
    closes = {}
    try:
        with socket.create_connection(("127.0.0.1", ARGS.health_port), timeout=5) as s:
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            _, _, text, _ = read_response(s, time.monotonic() + 5)
        for line in text.decode().splitlines():
            if line.startswith("gpuslice_webhook_connections_closed_total{"):
                closes[line.split('"')[1]] = float(line.split()[-1])
    except Exception as e:  # noqa: BLE001
        closes = {"scrape failed": type(e).__name__}
    results.append({"case": "gpuslice_webhook_connections_closed_total", "by_reason": closes})
    if ARGS.json:
        with open(ARGS.json, "w") as f:
            json.dump(results, f, indent=1)
    print()
    print("| case | what the abuser got | reviews (failed/n, p50, p99 ms) | probes (failed/n, p50, p99 ms) | RSS MiB "
          "before -> peak -> after |")
    print("|---|---|---|---|---|")
    for r in results[:-1]:
        rv, pb = r["real"]["review"], r["real"]["probe"]
        seen = "; ".join("%s=%s" % (k, v) for k, v in r["seen"].items())
        mib = " -> ".join("%.1f" % (k / 1024.0) for k in r["rss_kib"])
        print("| %s | %s | %d/%d, %s, %s | %d/%d, %s, %s | %s |" % (
            r["case"], seen, rv["failed"], rv["n"], rv["p50_ms"], rv["p99_ms"], pb["failed"], pb["n"],
            pb["p50_ms"], pb["p99_ms"], mib))
        for kind in ("review", "probe"):
            if r["real"][kind]["errors"]:
                print("|  | %s errors: %s | | | |" % (kind, r["real"][kind]["errors"]))
    print()
    print("gpuslice_webhook_connections_closed_total at the end: %s" %
          ", ".join("%s %s" % (k, int(v) if isinstance(v, float) else v)
                    for k, v in sorted(results[-1]["by_reason"].items())))


if __name__ == "__main__":
    main()
