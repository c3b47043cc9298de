#!/usr/bin/env python3
"""Does a Grafana dashboard find, on gpuslice's /metrics, every series it queries from gpuslice?

  dashboard_check.py --metrics FILE [--sources JSON] [--require REGEX] DASHBOARD.json...

FILE is Prometheus text (a scrape of /metrics, or the status view's exposition in the unit test). Every query of
a dashboard (panel targets' "expr", template variables' "query") is read for its series selectors. Each metric
name is classified by SOURCES (tests/data/hami-dashboards/metric-sources.json): names of the in-scope sources
(HAMi's scheduler, gpuslice) must be on FILE with a sample that carries every label the query uses on them: its
matchers (a literal `label="v"` must match a sample's value), `by (...)`, `on (...)`, `group_left/right (...)`,
a label_values() label, and the labels the legend prints when the query does not aggregate them away. Names of
the node-side exporters (HAMi's vGPU monitor, dcgm-exporter) are reported and skipped; a name of no source fails
(classify it first). With --require, in-scope names that do not match REGEX are skipped too (the unit test checks
only what the status view renders; the e2e test checks everything against a live scrape).

Exit 0 when every in-scope series is found, 1 with one line per missing series or label otherwise.
"""
import argparse
import json
import re
import sys
from collections import defaultdict

IDENT = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
LABEL_PAIR = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')
AGGREGATIONS = {"sum", "count", "avg", "min", "max", "group", "stddev", "stdvar", "quantile", "count_values"}
CLAUSES = {"by", "on", "group_left", "group_right"}  # their labels must exist on the series
IGNORED_CLAUSES = {"without", "ignoring"}  # label lists that need not exist
KEYWORDS = CLAUSES | IGNORED_CLAUSES | {"and", "or", "unless", "bool", "offset", "atan2", "inf", "nan"}


def parse_exposition(text):
    """name -> list of {label: value} (unescaped values)."""
    series = defaultdict(list)
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = IDENT.match(line)
        if not m:
            continue
        name, rest = m.group(0), line[m.end():]
        labels = {}
        if rest.startswith("{"):
            end = find_closing_brace(rest)
            for lm in LABEL_PAIR.finditer(rest[1:end]):
                labels[lm.group(1)] = re.sub(r"\\(.)", lambda e: {"n": "\n"}.get(e.group(1), e.group(1)), lm.group(2))
        series[name].append(labels)
    return series


def find_closing_brace(s):
    in_str = False
    i = 1
    while i < len(s):
        c = s[i]
        if in_str:
            if c == "\\":
                i += 1
            elif c == '"':
                in_str = False
        elif c == '"':
            in_str = True
        elif c == "}":
            return i
        i += 1
    return len(s)


def tokenize(expr):
    """PromQL tokens: ('id', x), ('str', x), ('num', x), ('op', x). Range and subquery brackets are dropped."""
    out = []
    i = 0
    while i < len(expr):
        c = expr[i]
        if c.isspace():
            i += 1
        elif c in "\"'`":
            j = i + 1
            buf = ""
            while j < len(expr) and expr[j] != c:
                if expr[j] == "\\" and c != "`":
                    j += 1
                buf += expr[j] if j < len(expr) else ""
                j += 1
            out.append(("str", buf))
            i = j + 1
        elif c == "[":  # [5m], [$__rate_interval], [1h:5m]
            i = expr.find("]", i) + 1 or len(expr)
        elif c == "$":  # a Grafana variable outside a string ($__interval, ${x})
            m = re.match(r"\$\{[^}]*\}|\$[A-Za-z_][A-Za-z0-9_]*", expr[i:])
            out.append(("num", m.group(0) if m else "$"))
            i += len(m.group(0)) if m else 1
        elif c.isdigit() or (c == "." and i + 1 < len(expr) and expr[i + 1].isdigit()):
            m = re.match(r"[0-9.eE+x_a-fA-F]+", expr[i:])
            out.append(("num", m.group(0)))
            i += len(m.group(0))
        elif IDENT.match(expr, i):
            m = IDENT.match(expr, i)
            out.append(("id", m.group(0)))
            i = m.end()
        else:
            two = expr[i:i + 2]
            if two in ("=~", "!~", "!=", "==", ">=", "<="):
                out.append(("op", two))
                i += 2
            else:
                out.append(("op", c))
                i += 1
    return out


class Query:
    def __init__(self, where, expr, legend):
        self.where = where
        self.expr = expr
        self.legend = legend
        self.selectors = []  # [(names, {label: (op, value)})]
        self.clause_labels = set()
        self.by_labels = set()
        self.aggregated = False
        self.label_values_label = None


def parse_query(where, expr, legend=""):
    q = Query(where, expr, legend)
    lv = re.fullmatch(r"\s*label_values\((.*),\s*([A-Za-z_][A-Za-z0-9_]*)\s*\)\s*", expr, re.S)
    if lv:
        expr, q.label_values_label = lv.group(1), lv.group(2)
    elif re.fullmatch(r"\s*label_values\(\s*[A-Za-z_][A-Za-z0-9_]*\s*\)\s*", expr):
        return q  # label_values(label): every series, none in particular
    toks = tokenize(expr)
    i = 0

    def label_list(j):  # toks[j] == '(' -> (labels, index after ')')
        labels = []
        j += 1
        while j < len(toks) and toks[j] != ("op", ")"):
            if toks[j][0] == "id":
                labels.append(toks[j][1])
            j += 1
        return labels, j + 1

    def matchers(j):  # toks[j] == '{' -> ({label: (op, value)}, index after '}')
        m = {}
        j += 1
        while j < len(toks) and toks[j] != ("op", "}"):
            if toks[j][0] == "id" and j + 2 < len(toks) and toks[j + 1][0] == "op" and toks[j + 2][0] == "str":
                m[toks[j][1]] = (toks[j + 1][1], toks[j + 2][1])
                j += 3
            else:
                j += 1
        return m, j + 1

    while i < len(toks):
        kind, val = toks[i]
        nxt = toks[i + 1] if i + 1 < len(toks) else ("", "")
        if kind == "id" and val in CLAUSES | IGNORED_CLAUSES and nxt == ("op", "("):
            labels, i = label_list(i + 1)
            if val in CLAUSES:
                q.clause_labels.update(labels)
            if val == "by":
                q.by_labels.update(labels)
            continue
        if kind == "id" and val in KEYWORDS:
            i += 1
            continue
        if kind == "id" and nxt == ("op", "("):  # a function or an aggregation
            if val in AGGREGATIONS:
                q.aggregated = True
            i += 1
            continue
        if kind == "id" and val in AGGREGATIONS and nxt in (("id", "by"), ("id", "without")):
            q.aggregated = True
            i += 1
            continue
        if kind == "id":
            m, j = matchers(i + 1) if nxt == ("op", "{") else ({}, i + 1)
            q.selectors.append(([val], m))
            i = j
            continue
        if (kind, val) == ("op", "{"):  # {__name__=~"a|b", ...}
            m, i = matchers(i)
            name = m.pop("__name__", None)
            if name:
                names = name[1].split("|") if name[0] == "=~" else [name[1]]
                q.selectors.append((names, m))
            continue
        i += 1
    return q


def legend_labels(legend):
    if not legend or legend == "__auto":
        return set()
    return set(re.findall(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}", legend))


def queries_of(dashboard, name):
    out = []

    def walk(obj, title):
        if isinstance(obj, dict):
            title = obj.get("title", title)
            for t in obj.get("targets", []) or []:
                if isinstance(t, dict) and isinstance(t.get("expr"), str) and t["expr"].strip():
                    out.append(parse_query(f"{name}: panel {title!r} {t.get('refId', '')}".rstrip(), t["expr"],
                                           t.get("legendFormat", "")))
            for k, v in obj.items():
                if k not in ("targets", "templating"):
                    walk(v, title)
        elif isinstance(obj, list):
            for v in obj:
                walk(v, title)

    walk(dashboard, "")
    for var in (dashboard.get("templating", {}) or {}).get("list", []):
        if var.get("type", "query") != "query":
            continue
        qtext = var.get("query")
        if isinstance(qtext, dict):
            qtext = qtext.get("query")
        if not isinstance(qtext, str) or not qtext.strip():
            qtext = var.get("definition", "")
        if qtext.strip():
            out.append(parse_query(f"{name}: variable ${var.get('name')}", qtext))
    return out


def classify(name, sources):
    for src, spec in sources["sources"].items():
        if name in spec.get("names", []) or any(name.startswith(p) for p in spec.get("prefixes", [])):
            return src
    return None


def value_ok(op, pattern, value):
    if "$" in pattern:  # a Grafana variable: any value will do
        return True
    if op == "=":
        return value == pattern
    if op == "!=":
        return value != pattern
    if op == "=~":
        return re.fullmatch(pattern, value) is not None
    if op == "!~":
        return re.fullmatch(pattern, value) is None
    return True


def check(queries, series, sources, require):
    errors, checked, skipped = [], [], defaultdict(set)
    in_scope = set(sources["in_scope"])
    for q in queries:
        for n, (names, matchers) in enumerate(q.selectors):
            needed = set(q.clause_labels)
            if q.label_values_label:
                needed.add(q.label_values_label)
            legend = legend_labels(q.legend)
            if q.aggregated:
                # The legend can only print what the aggregation keeps (a dashboard bug otherwise).
                for lab in sorted(legend - q.by_labels):
                    errors.append(f"{q.where}: the legend prints {{{{{lab}}}}} but `{q.expr}` aggregates it away")
            elif n == 0:
                needed |= legend  # the result carries the first (left-hand) series' labels
            for name in names:
                src = classify(name, sources)
                if src is None:
                    errors.append(f"{q.where}: {name} is in no source of metric-sources.json (`{q.expr}`)")
                    continue
                if src not in in_scope or (require and not re.search(require, name)):
                    skipped[src if src not in in_scope else "not required here"].add(name)
                    continue
                samples = series.get(name, [])
                want = needed | set(matchers)
                ok = [s for s in samples if want <= set(s) and all(value_ok(op, v, s[k]) for k, (op, v) in matchers.items())]
                if not samples:
                    errors.append(f"{q.where}: {name} is not on /metrics (`{q.expr}`)")
                elif not ok:
                    have = sorted(set().union(*(set(s) for s in samples)))
                    errors.append(f"{q.where}: no {name} sample has the labels {sorted(want)} with the query's values"
                                  f" (labels on /metrics: {have}) (`{q.expr}`)")
                else:
                    checked.append((name, tuple(sorted(want))))
    return errors, checked, skipped


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--metrics", required=True)
    ap.add_argument("--sources", default=None)
    ap.add_argument("--require", default=None)
    ap.add_argument("dashboards", nargs="+")
    a = ap.parse_args()
    if a.sources is None:
        import os
        a.sources = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "hami-dashboards",
                                 "metric-sources.json")
    sources = json.load(open(a.sources, encoding="utf-8"))
    series = parse_exposition(open(a.metrics, encoding="utf-8").read())
    failed = False
    for path in a.dashboards:
        d = json.load(open(path, encoding="utf-8"))
        name = d.get("title") or path
        queries = queries_of(d, name)
        errors, checked, skipped = check(queries, series, sources, a.require)
        names = sorted({n for n, _ in checked})
        print(f"{name}: {len(queries)} queries, {len(checked)} in-scope series references found"
              f" ({len(names)} names: {' '.join(names) or '-'})")
        for src in sorted(skipped):
            print(f"  skipped ({src}): {' '.join(sorted(skipped[src]))}")
        for e in errors:
            print(f"  MISSING {e}")
        failed = failed or bool(errors)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
