#!/usr/bin/env python3
"""Compares charts/gpuslice rendered with its defaults to the kustomize base (manifests/base), object by object.

  chart_vs_base.py CHART.yaml BASE.yaml

Helm's own labels (instance, version, managed-by, chart), the checksum/config pod annotation, and certificate
material (Secret data, caBundle) are set aside: they differ by construction. Everything else must be equal,
except the differences listed in ALLOWED (each with why). Exits 1 listing every other difference.
"""
import sys
import yaml

HELM_LABELS = {"app.kubernetes.io/instance", "app.kubernetes.io/version", "app.kubernetes.io/managed-by", "helm.sh/chart"}
# (kind, name): why the chart differs from the base there.
ALLOWED = {
    ("Namespace", "gpuslice-system"): "helm installs into a namespace (--create-namespace); the chart does not own it",
    ("Secret", "gpuslice-webhook-tls"): "the base takes the Secret from an overlay (gpuslice certs / cert-manager); the chart generates it",
}


def load(path):
    out = {}
    for d in yaml.safe_load_all(open(path)):
        if isinstance(d, dict) and d.get("kind"):
            out[(d["kind"], d["metadata"]["name"])] = d
    return out


def scrub(o):
    if isinstance(o, dict):
        o = {k: scrub(v) for k, v in o.items()}
        for k in ("labels", "matchLabels", "selector"):
            if isinstance(o.get(k), dict):
                # The chart labels every object app.kubernetes.io/name; the base only some (not in selectors).
                drop = HELM_LABELS | ({"app.kubernetes.io/name"} if k == "labels" else set())
                o[k] = {a: b for a, b in o[k].items() if a not in drop}
                if not o[k]:
                    del o[k]
        if isinstance(o.get("annotations"), dict):
            o["annotations"] = {a: b for a, b in o["annotations"].items() if a != "checksum/config"}
            if not o["annotations"]:
                del o["annotations"]
        o.pop("caBundle", None)
        return o
    if isinstance(o, list):
        return [scrub(x) for x in o]
    if isinstance(o, str):
        return "".join(o.split())  # folded CEL and lists: line breaks and indentation are not meaning
    return o


def diff(a, b, path, out):
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a:
                out.append(f"{path}.{k}: only in the base: {b[k]!r}"[:300])
            elif k not in b:
                out.append(f"{path}.{k}: only in the chart: {a[k]!r}"[:300])
            else:
                diff(a[k], b[k], f"{path}.{k}", out)
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            diff(x, y, f"{path}[{i}]", out)
    elif a != b:
        out.append(f"{path}: chart {a!r} != base {b!r}"[:400])


def main():
    chart, base = load(sys.argv[1]), load(sys.argv[2])
    problems = []
    for key in sorted(set(chart) | set(base)):
        if key in ALLOWED:
            print(f"  allowed  {key[0]}/{key[1]}: {ALLOWED[key]}")
            continue
        if key not in chart:
            problems.append(f"{key[0]}/{key[1]}: in the base, not rendered by the chart")
            continue
        if key not in base:
            problems.append(f"{key[0]}/{key[1]}: rendered by the chart, not in the base")
            continue
        c, b = chart[key], base[key]
        if key[0] == "ConfigMap":  # compare the configuration as data, not as text
            c["data"] = {k: yaml.safe_load(v) for k, v in c["data"].items()}
            b["data"] = {k: yaml.safe_load(v) for k, v in b["data"].items()}
        c, b = scrub(c), scrub(b)
        d = []
        diff(c, b, f"{key[0]}/{key[1]}", d)
        problems += d
        if not d:
            print(f"  same     {key[0]}/{key[1]}")
    for p in problems:
        print(f"  DIFF     {p}")
    sys.exit(1 if problems else 0)


main()
