#!/usr/bin/env python3
"""Differential test of gpuslice against upstream kube-scheduler (issue 11, item 6).

A seeded generator draws a sequence of pods using the hard constraints of ordinary pod YAML (required pod
affinity and anti-affinity on hostname or zone, DoNotSchedule topology spread with maxSkew, host ports). Each
pod goes twice, one at a time: as a GPU pod to gpuslice (tenant A) and as its CPU-only twin (same labels and
constraints, GPU resources replaced by a small CPU request) to kube-scheduler (tenant B), on identical copies of
the same test nodes (created by the caller, labelled gpuslice.io/diff=yes; the pods select them).

After both decided:
  - both must agree on whether the pod is schedulable (GPU capacity is never the limit: the nodes have far more
    card slots than the run creates pods);
  - each placement is checked by an independent constraint checker written from the API's definitions (not from
    either scheduler): no anti-affine pair in one domain (both directions), an affinity term satisfied by a pod
    already in the domain (or the pod's own labels when none exists anywhere), skew within maxSkew over the
    eligible domains, no host-port clash;
  - when both bound it on different nodes, the twin is re-created bound to gpuslice's node, so both clusters stay
    identical for the next pod; a pod both left Pending is deleted in both;
  - every pod placed so far still runs in both clusters: one that went Failed or Succeeded (the device agent, as
    kubelet, rejects a GPU pod whose Allocate failed) or went away counts for neither scheduler any more (both
    drop terminal pods) but would still count for the checker and for its twin, so the run stops there with that
    pod's phase and message instead of comparing decisions made on clusters that differ.
A failure prints the seed and the smallest reproducing pod sequence found by dropping pods one at a time (bounded
by --shrink-seconds), as YAML-ish lines that can be replayed with --replay.

Only kubectl against the two lab tenants (127.0.0.1). Exit 0 when every seed agrees, 1 otherwise.
"""

import argparse
import json
import random
import subprocess
import sys
import time

ZONE = "topology.kubernetes.io/zone"
HOST = "kubernetes.io/hostname"
NS = "e2e-diff"


class Cluster:
    def __init__(self, name, kubeconfig, gpu):
        self.name, self.kubeconfig, self.gpu = name, kubeconfig, gpu

    def kubectl(self, *args, stdin=None, check=True):
        p = subprocess.run(["kubectl", "--kubeconfig", self.kubeconfig, *args], input=stdin, capture_output=True,
                           text=True, timeout=60)
        if check and p.returncode != 0:
            raise RuntimeError(f"{self.name}: kubectl {' '.join(args)}: {p.stderr.strip()}")
        return p.stdout

    def pods(self):
        out = self.kubectl("-n", NS, "get", "pods", "-o", "json")
        return {p["metadata"]["name"]: p for p in json.loads(out)["items"]}


# ---- generator -------------------------------------------------------------------------------------------------

def gen_pod(rng, i):
    """One pod spec in a neutral form (both twins are rendered from it). Dense on purpose: two apps, five nodes,
    so anti-affinity, spread and ports run out of room within a run and both schedulers must refuse pods."""
    app = rng.choice(["a", "b"])
    p = {"name": f"p{i:02d}", "app": app, "anti": [], "aff": [], "spread": [], "ports": []}
    r = rng.random()
    if r < 0.45:
        p["anti"].append({"app": rng.choice(["a", "b", app]), "key": rng.choice([HOST, HOST, ZONE])})
    elif r < 0.6:
        p["aff"].append({"app": rng.choice([app, "a", "b"]), "key": rng.choice([ZONE, HOST])})
    if rng.random() < 0.35:
        p["spread"].append({"key": rng.choice([ZONE, HOST]), "skew": rng.choice([1, 1, 2]), "app": app})
    if rng.random() < 0.35:
        p["ports"].append({"port": rng.choice([8080, 8080, 8081]), "protocol": rng.choice(["TCP", "TCP", "UDP"])})
    return p


def gen_pods(seed, n):
    rng = random.Random(seed)
    return [gen_pod(rng, i) for i in range(n)]


def self_test():
    """The checker must catch each kind of violation (a checker that cannot fail proves nothing)."""
    nodes = {"n1": {HOST: "n1", ZONE: "z1"}, "n2": {HOST: "n2", ZONE: "z1"}, "n3": {HOST: "n3", ZONE: "z2"}}
    base = {"anti": [], "aff": [], "spread": [], "ports": []}
    a = dict(base, name="a", app="a")
    anti_host = dict(base, name="x", app="a", anti=[{"app": "a", "key": HOST}])
    anti_zone = dict(base, name="y", app="b", anti=[{"app": "a", "key": ZONE}])
    aff = dict(base, name="z", app="b", aff=[{"app": "a", "key": ZONE}])
    self_aff = dict(base, name="s", app="c", aff=[{"app": "c", "key": ZONE}])
    spread = dict(base, name="w", app="a", spread=[{"key": ZONE, "skew": 1, "app": "a"}])
    port = dict(base, name="p", app="b", ports=[{"port": 8080, "protocol": "TCP"}])
    udp = dict(base, name="u", app="b", ports=[{"port": 8080, "protocol": "UDP"}])
    cases = [
        (anti_host, "n1", [(a, "n1")], True), (anti_host, "n2", [(a, "n1")], False),
        (a, "n1", [(anti_host, "n1")], True),  # symmetry
        (anti_zone, "n2", [(a, "n1")], True), (anti_zone, "n3", [(a, "n1")], False),
        (aff, "n3", [(a, "n1")], True), (aff, "n2", [(a, "n1")], False), (self_aff, "n3", [], False),
        (aff, "n1", [], True),
        (spread, "n1", [(a, "n1")], True), (spread, "n3", [(a, "n1")], False),
        (port, "n1", [(port, "n1")], True), (port, "n2", [(port, "n1")], False), (udp, "n1", [(port, "n1")], False),
    ]
    bad = [(p["name"], n, want) for p, n, placed, want in cases if bool(check_placement(p, n, placed, nodes)) != want]
    running = {"status": {"phase": "Running"}}
    failed = {"status": {"phase": "Failed", "reason": "UnexpectedAdmissionError", "message": "Pod was rejected"}}
    deleting = {"metadata": {"deletionTimestamp": "2026-12-04T03:47:59Z"}, "status": {"phase": "Running"}}
    twins = [  # (gpuslice's pods, kube-scheduler's pods, divergence expected) with pod a placed on n1
        ({"a": running}, {"a": running}, False), ({"a": failed}, {"a": running}, True),
        ({"a": running}, {}, True), ({"a": deleting}, {"a": running}, True),
        ({"a": dict(running, status={"phase": "Succeeded"})}, {"a": running}, True),
    ]
    bad += [("diverged", g, k) for g, k, want in twins
            if bool(diverged([(a, "n1")], [("gpuslice", g), ("kube-scheduler", k)])) != want]
    if bad:
        print(f"FAIL  differential: checker self-test: wrong verdicts (pod, node, violation expected): {bad}")
        return 1
    print(f"PASS  differential: checker self-test ({len(cases) + len(twins)} verdicts, each kind of violation and "
          f"of divergence caught)")
    return 0


def render(p, gpu, node_name=None):
    spec = {
        "terminationGracePeriodSeconds": 0,
        "nodeSelector": {"gpuslice.io/diff": "yes"},
        "containers": [{
            "name": "main", "image": "registry.k8s.io/pause:3.10",
            "resources": ({"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000",
                                      "nvidia.com/gpucores": "1"}} if gpu else
                          {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"cpu": "10m", "memory": "16Mi"}}),
        }],
    }
    if p["ports"]:
        spec["containers"][0]["ports"] = [{"containerPort": 1000 + k, "hostPort": x["port"], "protocol": x["protocol"]}
                                          for k, x in enumerate(p["ports"])]
    aff = {}
    if p["anti"]:
        aff["podAntiAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": t["app"]}}, "topologyKey": t["key"]} for t in p["anti"]]}
    if p["aff"]:
        aff["podAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": t["app"]}}, "topologyKey": t["key"]} for t in p["aff"]]}
    if aff:
        spec["affinity"] = aff
    if p["spread"]:
        spec["topologySpreadConstraints"] = [
            {"maxSkew": s["skew"], "topologyKey": s["key"], "whenUnsatisfiable": "DoNotSchedule",
             "labelSelector": {"matchLabels": {"app": s["app"]}}} for s in p["spread"]]
    if node_name:
        spec["nodeName"] = node_name
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": p["name"], "labels": {"app": p["app"]}},
            "spec": spec}


def describe(p):
    parts = [f"{p['name']} app={p['app']}"]
    parts += [f"anti({t['app']}@{t['key'].split('/')[-1]})" for t in p["anti"]]
    parts += [f"aff({t['app']}@{t['key'].split('/')[-1]})" for t in p["aff"]]
    parts += [f"spread({s['app']}@{s['key'].split('/')[-1]},maxSkew={s['skew']})" for s in p["spread"]]
    parts += [f"hostPort({x['port']}/{x['protocol']})" for x in p["ports"]]
    return " ".join(parts)


# ---- the independent checker ------------------------------------------------------------------------------------

def check_placement(p, node, placed, nodes):
    """Violations of p's constraints if placed on `node`, given `placed` [(pod, node)] and `nodes` {name: labels}.
    Written from the API reference of PodAffinityTerm, TopologySpreadConstraint and ContainerPort."""
    errs = []
    labels = nodes[node]

    def same_domain(key, other_node):
        return key in labels and key in nodes[other_node] and nodes[other_node][key] == labels[key]

    for t in p["anti"]:
        for q, qn in placed:
            if q["app"] == t["app"] and same_domain(t["key"], qn):
                errs.append(f"anti-affinity {t} broken by {q['name']} on {qn}")
    for q, qn in placed:  # symmetry: existing pods' required anti-affinity
        for t in q["anti"]:
            if p["app"] == t["app"] and same_domain(t["key"], qn):
                errs.append(f"{q['name']} on {qn} has anti-affinity {t} against this pod")
    for t in p["aff"]:
        if t["key"] not in labels:
            errs.append(f"affinity {t}: node has no {t['key']}")
            continue
        anywhere = [q for q, _ in placed if q["app"] == t["app"]]
        here = [q for q, qn in placed if q["app"] == t["app"] and same_domain(t["key"], qn)]
        if not here and not (not anywhere and p["app"] == t["app"]):
            errs.append(f"affinity {t}: no matching pod in the domain")
    for s in p["spread"]:
        key = s["key"]
        if key not in labels:
            errs.append(f"spread {s}: node has no {key}")
            continue
        counts = {}
        for n, l in nodes.items():
            if key in l:
                counts.setdefault(l[key], 0)
        for q, qn in placed:
            if q["app"] == s["app"] and key in nodes[qn]:
                counts[nodes[qn][key]] += 1
        mn = min(counts.values())
        if counts[labels[key]] + 1 - mn > s["skew"]:
            errs.append(f"spread {s}: domain {labels[key]} would have {counts[labels[key]] + 1}, min {mn}")
    for x in p["ports"]:
        for q, qn in placed:
            if qn == node and any(y["port"] == x["port"] and y["protocol"] == x["protocol"] for y in q["ports"]):
                errs.append(f"hostPort {x['port']}/{x['protocol']} already used by {q['name']}")
    return errs


DIVERGED = "clusters diverged: "


def diverged(placed, cluster_pods):
    """Problems for the placed pods [(pod, node)] that no longer run in a cluster, given cluster_pods
    [(cluster name, {pod name: pod object})]: gone, being deleted, or in a terminal phase. kube-scheduler's pod
    informer lists only pods with status.phase!=Succeeded,status.phase!=Failed (pkg/scheduler/scheduler.go,
    newPodInformer) and gpuslice's snapshot drops them too, so from then on the clusters are not identical."""
    problems = []
    for q, qn in placed:
        for who, pods in cluster_pods:
            pod = pods.get(q["name"])
            status = (pod or {}).get("status", {}) or {}
            phase = status.get("phase", "")
            if pod is None:
                what = "is gone"
            elif phase in ("Succeeded", "Failed"):
                what = f"went {phase}"
                if status.get("reason") or status.get("message"):
                    what += f" ({status.get('reason', '')}: {status.get('message', '')})"
            elif (pod.get("metadata", {}) or {}).get("deletionTimestamp"):
                what = "is being deleted"
            else:
                continue
            problems.append(f"{DIVERGED}{q['name']}: {who}'s pod on {qn} {what} after it was bound; neither "
                            f"scheduler counts it any more, its twin still runs, so the decisions from here on are "
                            f"not compared (not a scheduling decision: see the device agent's and kwok's logs)")
    return problems


def feasible_anywhere(p, placed, nodes):
    return [n for n in sorted(nodes) if not check_placement(p, n, placed, nodes)]


# ---- one run ----------------------------------------------------------------------------------------------------

def outcome(pod):
    if pod is None:
        return None
    node = pod.get("spec", {}).get("nodeName")
    if node:
        return ("bound", node)
    for c in pod.get("status", {}).get("conditions", []) or []:
        if c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("reason") == "Unschedulable":
            # kube-scheduler appends its PostFilter's result after the summary (". preemption: ...", in 1.34
            # also ". no new claims to deallocate,"): keep the summary up to its first ". ".
            msg = c.get("message", "")
            return ("pending", msg.split(". ")[0] + ("." if ". " in msg else ""))
    return None


def wait_decided(cluster, name, timeout):
    end = time.time() + timeout
    while time.time() < end:
        try:
            o = outcome(json.loads(cluster.kubectl("-n", NS, "get", "pod", name, "-o", "json")))
        except (RuntimeError, json.JSONDecodeError):
            o = None
        if o:
            return o
        time.sleep(0.15)
    return ("undecided", "")


def clear(clusters):
    for c in clusters:
        c.kubectl("-n", NS, "delete", "pods", "--all", "--grace-period=0", "--force", "--wait=false", check=False)
    end = time.time() + 60
    while time.time() < end and any(c.pods() for c in clusters):
        time.sleep(0.3)


def delete_pod(c, name):
    c.kubectl("-n", NS, "delete", "pod", name, "--grace-period=0", "--force", "--wait=false", check=False)
    end = time.time() + 30
    while time.time() < end:
        if name not in c.pods():
            return
        time.sleep(0.2)


def run(pods, gs, ks, nodes, timeout, log):
    """Runs the sequence; returns a list of problems (empty: agreement and every placement valid)."""
    clear([gs, ks])
    placed = []
    problems = []
    for p in pods:
        gs.kubectl("-n", NS, "apply", "-f", "-", stdin=json.dumps(render(p, gpu=True)))
        ks.kubectl("-n", NS, "apply", "-f", "-", stdin=json.dumps(render(p, gpu=False)))
        a = wait_decided(gs, p["name"], timeout)
        b = wait_decided(ks, p["name"], timeout)
        gone = diverged(placed, [("gpuslice", gs.pods()), ("kube-scheduler", ks.pods())])
        if gone:
            log(f"  {describe(p)}\n      gpuslice: {a[0]} {a[1]} | kube-scheduler: {b[0]} {b[1]} | not compared")
            problems += gone
            break
        oracle = feasible_anywhere(p, placed, nodes)
        log(f"  {describe(p)}\n      gpuslice: {a[0]} {a[1]} | kube-scheduler: {b[0]} {b[1]} | checker: "
            f"{'fits ' + ','.join(oracle) if oracle else 'fits nowhere'}")
        for who, o in (("gpuslice", a), ("kube-scheduler", b)):
            if o[0] == "undecided":
                problems.append(f"{p['name']}: {who} did not decide within {timeout} s")
            elif o[0] == "bound":
                errs = check_placement(p, o[1], placed, nodes)
                if errs:
                    problems.append(f"{p['name']}: {who} placed it on {o[1]}: " + "; ".join(errs))
        if (a[0] == "bound") != (b[0] == "bound"):
            problems.append(f"{p['name']}: gpuslice {a[0]} {a[1]}, kube-scheduler {b[0]} {b[1]}")
        elif a[0] == "pending" and a[1] != b[1]:
            # Same state, same filters in the same order: the "0/N nodes are available" summaries must agree.
            problems.append(f"{p['name']}: both pending, different reasons: gpuslice \"{a[1]}\", "
                            f"kube-scheduler \"{b[1]}\"")
        if a[0] == "pending" and oracle:
            problems.append(f"{p['name']}: both pending but the checker finds it fits on {','.join(oracle)}")
        if a[0] == "bound" and not oracle:
            problems.append(f"{p['name']}: bound but the checker finds it fits nowhere")
        if a[0] == "bound":
            placed.append((p, a[1]))
            if b[0] != "bound" or b[1] != a[1]:
                # Keep the two clusters identical: the twin goes where gpuslice put the pod.
                delete_pod(ks, p["name"])
                ks.kubectl("-n", NS, "apply", "-f", "-", stdin=json.dumps(render(p, gpu=False, node_name=a[1])))
        else:
            delete_pod(gs, p["name"])
            if b[0] == "bound":
                delete_pod(ks, p["name"])
            else:
                delete_pod(ks, p["name"])
        if problems:
            break
    return problems


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpuslice-kubeconfig")
    ap.add_argument("--kube-scheduler-kubeconfig")
    ap.add_argument("--seeds", default="1,2")
    ap.add_argument("--pods", type=int, default=14)
    ap.add_argument("--timeout", type=float, default=20)
    ap.add_argument("--shrink-seconds", type=float, default=240)
    ap.add_argument("--verbose", action="store_true", help="print every pod's outcome also when the seed passes")
    ap.add_argument("--replay", help="a JSON list of pods (as printed on failure) instead of a seed")
    ap.add_argument("--self-test", action="store_true", help="check the checker only (no cluster)")
    args = ap.parse_args()
    if args.self_test:
        return self_test()
    gs = Cluster("gpuslice", args.gpuslice_kubeconfig, True)
    ks = Cluster("kube-scheduler", args.kube_scheduler_kubeconfig, False)
    nodes = {}
    for n in json.loads(gs.kubectl("get", "nodes", "-l", "gpuslice.io/diff=yes", "-o", "json"))["items"]:
        nodes[n["metadata"]["name"]] = n["metadata"].get("labels", {})
    kn = {n["metadata"]["name"]: n["metadata"].get("labels", {}) for n in
          json.loads(ks.kubectl("get", "nodes", "-l", "gpuslice.io/diff=yes", "-o", "json"))["items"]}
    if not nodes or kn != nodes:
        print(f"FAIL  differential: node copies differ or are missing: {sorted(nodes)} vs {sorted(kn)}")
        return 1
    failed = 0
    runs = [("replay", json.loads(args.replay))] if args.replay else \
        [(s, gen_pods(int(s), args.pods)) for s in args.seeds.split(",")]
    for seed, pods in runs:
        t0 = time.time()
        lines = []
        problems = run(pods, gs, ks, nodes, args.timeout, lines.append)
        if not problems:
            print(f"PASS  differential: seed {seed}, {len(pods)} pods on {len(nodes)} nodes, same schedulable set, "
                  f"every placement valid ({time.time() - t0:.0f} s)")
            bound = sum(1 for l in lines if "gpuslice: bound" in l)
            print(f"      {bound} bound, {len(pods) - bound} refused by both")
            if args.verbose:
                print("\n".join(lines))
            continue
        failed += 1
        print(f"FAIL  differential: seed {seed}: {problems[0]}")
        print("\n".join(lines))
        if problems[0].startswith(DIVERGED):
            # Not a disagreement between the schedulers: shrinking would only re-run the lab's fault.
            print(f"      replay: --replay '{json.dumps(pods)}'")
            continue
        # Shrink: drop pods one at a time while the run still fails.
        smallest = pods[: next((i for i, p in enumerate(pods) if problems[0].startswith(p["name"] + ":")),
                               len(pods) - 1) + 1]
        deadline = time.time() + args.shrink_seconds
        i = 0
        while i < len(smallest) - 1 and time.time() < deadline:
            trial = smallest[:i] + smallest[i + 1:]
            if run(trial, gs, ks, nodes, args.timeout, lambda _: None):
                smallest = trial
            else:
                i += 1
        print(f"      seed {seed}: smallest reproducing sequence ({len(smallest)} pods):")
        for p in smallest:
            print(f"        {describe(p)}")
        print(f"      replay: --replay '{json.dumps(smallest)}'")
    clear([gs, ks])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
