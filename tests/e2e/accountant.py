#!/usr/bin/env python3
"""The e2e accountant: an independent audit of one tenant from the API alone, counted the way HAMi counts.

It reads pods and nodes with kubectl and nothing else: no gpuslice code, no gpuslice metrics, no gpuslice
codec. That is deliberate: the accountant judges gpuslice, so it must not share gpuslice's decoders (a bug in
scheduler/allocation.cc would then be invisible to the judge). The decoding below follows HAMi v2.10's own source
(pkg/util/util.go DecodePodDevices / DecodeContainerDevices: containers separated by ';', devices by ':', fields
"UUID,Type,usedmem,usedcores"; pkg/util/nodelock/nodelock.go: the lock value "RFC3339-time,namespace,name";
pkg/scheduler/scheduler.go: a pod with hami.io/vgpu-node that is not Succeeded/Failed holds its devices, bound or
not, being deleted or not).

Four questions:
1. Is any card over-committed? Per card UUID the sums of memory, cores and slices of every pod holding it must
   stay within the devmem, devcore and count its node registers in hami.io/node-nvidia-register; an allocation
   must name a card of the node it names.
2. Is any bound GPU pod inconsistent? A pod bound by our scheduler must carry an allocation for the node it is
   bound to (vgpu-node == spec.nodeName, vgpu-devices-allocated not empty).
3. Is any GPU pod of ours lost? Every pod of ours (the ledger's creates, plus every pod of the namespaces with
   our schedulerName) that its owner did not delete must exist and be bound, or Pending with a reason
   (PodScheduled=False with a reason and a message). An unbound pod that still carries an allocation holds
   phantom capacity in HAMi's count: reported too.
4. Is any node lock left past its allocation? A hami.io/mutex.lock is legitimate only while its holder is being
   allocated: the holder exists, has not finished, is assigned to that node and its bind-phase is "allocating",
   and the lock is younger than --lock-max-age (default 30 s, far above any bind; HAMi itself only overwrites a
   lock after 5 minutes): an older one guards an allocation that is no longer progressing.

Usage: accountant.py --kubeconfig FILE [--namespace NS ...] [--ledger FILE] [--settle SECONDS]
                     [--scheduler-name NAME] [--json FILE]
  --settle: re-audit every 0.5 s until clean or the time is up (a fault's aftermath settles: locks are released,
  Pending pods get their reason); prints the time to clean. The last line is the verdict:
  "accountant: CLEAN after T s: ..." (exit 0) or "accountant: DIRTY after T s: ..." (exit 1) with every finding
  above it. --json writes the verdict's figures (for bench/RESULTS.md).
  Ledger: lines "created NS/NAME" and "deleted NS/NAME" (tests/e2e/burst.py writes it).
"""
import argparse
import datetime
import json
import subprocess
import sys
import time

ASSIGNED = "hami.io/vgpu-node"
ALLOCATED = "hami.io/vgpu-devices-allocated"
BIND_PHASE = "hami.io/bind-phase"
REGISTER = "hami.io/node-nvidia-register"
LOCK = "hami.io/mutex.lock"


def kubectl_items(kubeconfig, *args):
    out = subprocess.run(["kubectl", "--kubeconfig", kubeconfig, "--request-timeout=20s", *args, "-o", "json"],
                         capture_output=True, text=True, timeout=40)
    if out.returncode != 0:
        raise RuntimeError("kubectl %s: %s" % (" ".join(args), out.stderr.strip()[:300]))
    return json.loads(out.stdout)["items"]


def decode_devices(text):
    """HAMi's DecodePodDevices for one device type: [(uuid, mem, cores)]; raises ValueError on a bad field."""
    devs = []
    for ctr in (text or "").split(";"):
        for dev in ctr.split(":"):
            if not dev:
                continue
            f = dev.split(",")
            if len(f) < 4 or not f[0]:
                raise ValueError("device %r has not the four fields UUID,Type,mem,cores" % dev)
            devs.append((f[0], int(f[2]), int(f[3])))
    return devs


def annotations(obj):
    return (obj.get("metadata") or {}).get("annotations") or {}


def finished(pod):
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def lock_age(stamp, now):
    """Seconds since the lock's RFC 3339 time (HAMi writes time.Now().Format(time.RFC3339)); None if unparsable."""
    try:
        t = datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return None
    if t.tzinfo is None:
        return None
    return (now - t).total_seconds()


def audit(pods, nodes, namespaces, ledger, scheduler_name, lock_max_age=30.0, now=None):
    now = now or datetime.datetime.now(datetime.timezone.utc)
    findings = []
    cards = {}
    for n in nodes:
        reg = annotations(n).get(REGISTER)
        if not reg:
            continue
        try:
            devices = json.loads(reg)
        except ValueError:
            findings.append("node %s: %s is not JSON" % (n["metadata"]["name"], REGISTER))
            continue
        for d in devices:
            cards[d["id"]] = {"node": n["metadata"]["name"], "devmem": d.get("devmem", 0),
                              "devcore": d.get("devcore", 0), "count": d.get("count", 0),
                              "mem": 0, "cores": 0, "slices": 0, "holders": []}
    by_name = {}
    for p in pods:
        md = p["metadata"]
        who = md["namespace"] + "/" + md["name"]
        by_name[who] = p
        a = annotations(p)
        if ASSIGNED not in a or finished(p):
            continue
        try:
            devs = decode_devices(a.get(ALLOCATED, ""))
        except ValueError as e:
            findings.append("%s: %s %r: %s" % (who, ALLOCATED, a.get(ALLOCATED), e))
            continue
        for uuid, mem, cores in devs:
            c = cards.get(uuid)
            if c is None:
                findings.append("%s holds card %s that no node registers" % (who, uuid))
                continue
            if c["node"] != a[ASSIGNED]:
                findings.append("%s: card %s is on %s but vgpu-node says %s" % (who, uuid, c["node"], a[ASSIGNED]))
            c["mem"] += mem
            c["cores"] += cores
            c["slices"] += 1
            c["holders"].append(md["name"])
    over = 0
    for uuid, c in sorted(cards.items()):
        if c["mem"] > c["devmem"] or c["cores"] > c["devcore"] or c["slices"] > c["count"]:
            over += 1
            findings.append("card %s on %s over-committed as HAMi counts it: mem %d/%d cores %d/%d slices %d/%d (%s)"
                            % (uuid, c["node"], c["mem"], c["devmem"], c["cores"], c["devcore"], c["slices"],
                               c["count"], ",".join(c["holders"][:12])))

    # Pods of ours: the ledger's creates, plus every pod of the namespaces with our scheduler name.
    created, deleted = set(), set()
    if ledger:
        for line in open(ledger):
            parts = line.split()
            if len(parts) == 2 and parts[0] in ("created", "deleted"):
                (created if parts[0] == "created" else deleted).add(parts[1])
    ours = set(created - deleted)
    for who, p in by_name.items():
        if p["metadata"]["namespace"] in namespaces and p["spec"].get("schedulerName") == scheduler_name \
                and who not in deleted:
            ours.add(who)
    bound = pending = lost = phantom = inconsistent = 0
    for who in sorted(ours):
        p = by_name.get(who)
        if p is None:
            lost += 1
            findings.append("%s lost: created, never deleted by its owner, gone from the API" % who)
            continue
        if p["metadata"].get("deletionTimestamp"):
            continue  # being deleted (by the namespace's deletion): no longer ours to account
        a = annotations(p)
        node = p["spec"].get("nodeName")
        if node:
            bound += 1
            if finished(p):
                continue
            if a.get(ASSIGNED) != node or not a.get(ALLOCATED, "").strip(":;"):
                inconsistent += 1
                findings.append("%s bound to %s but its allocation says vgpu-node=%r devices=%r"
                                % (who, node, a.get(ASSIGNED), a.get(ALLOCATED)))
            continue
        conds = [c for c in (p.get("status") or {}).get("conditions") or [] if c.get("type") == "PodScheduled"]
        if conds and conds[0].get("status") == "False" and conds[0].get("reason") and conds[0].get("message"):
            pending += 1
        else:
            lost += 1
            findings.append("%s lost: Pending with no reason (PodScheduled: %s)" % (who, json.dumps(conds)[:200]))
        if ASSIGNED in a:
            phantom += 1
            findings.append("%s is unbound but holds an allocation on %s (bind-phase %s): phantom capacity"
                            % (who, a[ASSIGNED], a.get(BIND_PHASE, "-")))

    locks = left = 0
    for n in nodes:
        v = annotations(n).get(LOCK)
        if v is None:
            continue
        locks += 1
        name = n["metadata"]["name"]
        parts = v.split(",")
        if len(parts) != 3:
            left += 1
            findings.append("node %s: lock %r names no holder (legacy form) and outlives any allocation" % (name, v))
            continue
        holder = parts[1] + "/" + parts[2]
        p = by_name.get(holder)
        why = None
        if p is None:
            why = "its holder %s is gone" % holder
        else:
            a = annotations(p)
            where = p["spec"].get("nodeName") or a.get(ASSIGNED)
            if finished(p):
                why = "its holder %s has finished" % holder
            elif where != name:
                why = "its holder %s is on %s" % (holder, where or "no node")
            elif a.get(BIND_PHASE) != "allocating":
                why = "its holder %s is past allocation (bind-phase %s)" % (holder, a.get(BIND_PHASE, "-"))
            else:
                age = lock_age(parts[0], now)
                if age is None:
                    why = "its time %r is not RFC 3339" % parts[0]
                elif age > lock_max_age:
                    why = "held for %.0f s by %s, still allocating: the bind it guards is not progressing" % (age, holder)
        if why:
            left += 1
            findings.append("node %s: lock %r left: %s" % (name, v, why))
    figures = {"cards": len(cards), "over_committed": over, "pods": len(ours), "bound": bound,
               "pending_with_reason": pending, "lost": lost, "phantom": phantom, "inconsistent": inconsistent,
               "owner_deleted": len(deleted), "locks": locks, "locks_left": left}
    summary = ("cards %d (over-committed %d), pods of ours %d (bound %d, inconsistent %d, pending with a reason %d, "
               "lost %d, unbound holding an allocation %d; %d deleted by their owner), node locks %d (left %d)"
               % (len(cards), over, len(ours), bound, inconsistent, pending, lost, phantom, len(deleted), locks, left))
    return findings, summary, figures


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kubeconfig", required=True)
    ap.add_argument("--namespace", action="append", default=[])
    ap.add_argument("--ledger")
    ap.add_argument("--settle", type=float, default=0)
    ap.add_argument("--scheduler-name", default="gpuslice-scheduler")
    ap.add_argument("--json")
    ap.add_argument("--lock-max-age", type=float, default=30.0)
    args = ap.parse_args()
    t0 = time.monotonic()
    deadline = t0 + args.settle
    audits = 0
    figures = {}
    while True:
        audits += 1
        try:
            pods = kubectl_items(args.kubeconfig, "get", "pods", "-A")
            nodes = kubectl_items(args.kubeconfig, "get", "nodes")
            findings, summary, figures = audit(pods, nodes, set(args.namespace), args.ledger, args.scheduler_name,
                                             args.lock_max_age)
        except (RuntimeError, subprocess.TimeoutExpired, ValueError) as e:
            findings, summary = ["the API could not be read: %s" % e], "no audit"
        if not findings or time.monotonic() >= deadline:
            break
        time.sleep(0.5)
    took = time.monotonic() - t0
    for f in findings[:40]:
        print("  " + f)
    if len(findings) > 40:
        print("  ... and %d more" % (len(findings) - 40))
    verdict = "DIRTY" if findings else "CLEAN"
    if args.json:
        with open(args.json, "w") as out:
            json.dump(dict(figures, verdict=verdict, seconds_to_clean=round(took, 1), audits=audits,
                           findings=findings[:40]), out)
    print("accountant: %s after %.1f s (%d audits): %s" % (verdict, took, audits, summary))
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
