#!/usr/bin/env python3
"""Self-test of the e2e accountant (tests/e2e/accountant.py), run by CTest: the judge must be able to convict.
Feeds audit() the states the issue reported after an API server restart (an unbound pod with an allocating
allocation putting a card at 100000/81920 MiB and 125/100 cores, the node lock held by the pod whose bind died,
a Pending pod with no reason, a pod that vanished without its owner deleting it) and a clean state; each finding
must be reported, and the clean state must be CLEAN."""
import datetime
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import accountant  # noqa: E402

NOW = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
REG = json.dumps([{"id": "GPU-a", "index": 0, "count": 10, "devmem": 81920, "devcore": 100, "type": "A100"},
                  {"id": "GPU-b", "index": 1, "count": 10, "devmem": 81920, "devcore": 100, "type": "A100"}])


def node(name, lock=None):
    ann = {accountant.REGISTER: REG}
    if lock:
        ann[accountant.LOCK] = lock
    return {"metadata": {"name": name, "annotations": ann}}


def pod(name, node_name=None, assigned=None, devices=None, phase="Pending", bind_phase=None, reason=None):
    ann = {}
    if assigned:
        ann[accountant.ASSIGNED] = assigned
    if devices:
        ann[accountant.ALLOCATED] = devices
    if bind_phase:
        ann[accountant.BIND_PHASE] = bind_phase
    status = {"phase": phase}
    if reason:
        status["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": reason, "message": "0/1 nodes"}]
    spec = {"schedulerName": "gpuslice-scheduler"}
    if node_name:
        spec["nodeName"] = node_name
    return {"metadata": {"namespace": "ns", "name": name, "annotations": ann}, "spec": spec, "status": status}


def run(pods, nodes, ledger_lines=()):
    with tempfile.NamedTemporaryFile("w", delete=False) as f:
        f.write("".join(line + "\n" for line in ledger_lines))
    try:
        return accountant.audit(pods, nodes, {"ns"}, f.name, "gpuslice-scheduler")
    finally:
        os.unlink(f.name)


failures = []


def expect(cond, what):
    print(("ok    " if cond else "FAIL  ") + what)
    if not cond:
        failures.append(what)


# Clean: two bound pods sharing GPU-a within its capacity, one Pending with a reason, one deleted by its owner.
findings, summary, fig = run(
    [pod("p1", "n1", "n1", "GPU-a,NVIDIA,40000,50:;", "Running", "success"),
     pod("p2", "n1", "n1", "GPU-a,NVIDIA,40000,50:;", "Running", "success"),
     pod("p3", reason="Unschedulable")],
    [node("n1")], ["created ns/p1", "created ns/p2", "created ns/p3", "created ns/p4", "deleted ns/p4"])
expect(not findings and fig["bound"] == 2 and fig["pending_with_reason"] == 1, "clean state is CLEAN: " + summary)

# The aftermath of an API server killed mid-bind.
findings, summary, fig = run(
    [pod("p1", "n1", "n1", "GPU-a,NVIDIA,60000,75:;", "Running", "success"),
     pod("dead-bind", None, "n1", "GPU-a,NVIDIA,40000,50:;", bind_phase="allocating"),
     pod("no-reason")],
    [node("n1", "2026-12-01T13:00:00Z,ns,dead-bind")], ["created ns/p1", "created ns/dead-bind", "created ns/gone"])
text = "\n".join(findings)
expect(fig["over_committed"] == 1 and "mem 100000/81920 cores 125/100" in text, "over-committed card found")
expect(fig["phantom"] == 1 and "dead-bind is unbound but holds an allocation" in text, "phantom allocation found")
expect(fig["locks_left"] == 1 and "lock" in text and "dead-bind" in text, "lock of the dead bind found")
expect("ns/no-reason lost: Pending with no reason" in text, "Pending pod without a reason found")
expect("ns/gone lost: created, never deleted by its owner" in text, "vanished pod found")
expect(fig["lost"] == 3, "lost counts the vanished pod, the pod with no reason and the dead bind: %d" % fig["lost"])

# A bound pod whose allocation names another node, a card nobody registers, a malformed device list.
findings, summary, fig = run(
    [pod("wrong-node", "n1", "n2", "GPU-a,NVIDIA,1000,1:;", "Running", "success"),
     pod("ghost", "n1", "n1", "GPU-zz,NVIDIA,1000,1:;", "Running", "success"),
     pod("garbage", "n1", "n1", "GPU-a,NVIDIA", "Running", "success")],
    [node("n1")])
text = "\n".join(findings)
expect("wrong-node bound to n1 but its allocation says vgpu-node='n2'" in text, "binding/allocation mismatch found")
expect("card GPU-a is on n1 but vgpu-node says n2" in text, "card on another node found")
expect("ghost holds card GPU-zz that no node registers" in text, "unregistered card found")
expect("garbage: hami.io/vgpu-devices-allocated" in text, "malformed allocation found")

# A legitimate in-flight lock (holder assigned there and allocating) is not a finding; a lock of a finished pod is.
findings, _, fig = run([pod("inflight", None, "n1", "GPU-b,NVIDIA,1000,1:;", bind_phase="allocating",
                            reason="Binding")], [node("n1", NOW + ",ns,inflight")])
expect(fig["locks_left"] == 0, "in-flight lock accepted")
findings, _, fig = run([pod("done", "n1", "n1", "GPU-b,NVIDIA,1000,1:;", "Succeeded", "success")],
                       [node("n1", "2026-12-01T13:00:00Z,ns,done")])
expect(fig["locks_left"] == 1, "lock of a finished pod found")

print("%d failed" % len(failures))
sys.exit(1 if failures else 0)
