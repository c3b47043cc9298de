#!/usr/bin/env python3
"""Keeps docs/architecture.md true.

Reads the folder table of docs/architecture.md ("may include" column) and checks every project include of every
.h/.cc in those folders against it. Then, for every target the table marks "(pure)" or "(no Asio)", reads the
target's SOURCES from the folder's CMakeLists.txt and checks that those sources, and the project headers they
include transitively, contain no Asio, Beast or OpenSSL include; "(pure)" targets (the decision cores) must not
read the clock either. Exit status 1 with one line per
violation; run from anywhere: `tests/architecture_check.py [includes|pure]`.
"""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
SYSTEM_INCLUDE = re.compile(r'^\s*#\s*include\s+<([^>]+)>', re.M)
FORBIDDEN_SYSTEM = ("boost/asio", "boost/beast", "openssl/")
CLOCK_READ = re.compile(r"\b(system_clock|steady_clock|high_resolution_clock)::now\s*\(|\btime\s*\(\s*(nullptr|NULL|0)\s*\)")


def read_table():
    """Returns {folder: (set of allowed folders, [pure target names])}, in the table's order."""
    text = (ROOT / "docs/architecture.md").read_text()
    table = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 5 or not re.fullmatch(r"`[a-z_]+/`", cells[0]):
            continue
        folder = cells[0].strip("`/")
        allowed = cells[3]
        if allowed == "everything above":
            allowed_set = set(table)
        else:
            allowed_set = {a.strip() for a in allowed.split(",") if a.strip()}
        pure = re.findall(r"`([a-z_]+)` \((pure|no Asio)\)", cells[1])
        table[folder] = (allowed_set, pure)
    if not table:
        sys.exit("architecture_check: no folder table found in docs/architecture.md")
    order = list(table)
    for folder, (allowed, _) in table.items():
        for a in allowed:
            if a not in table:
                sys.exit(f"architecture_check: {folder}: 'may include' names unknown folder '{a}'")
            if order.index(a) >= order.index(folder):
                sys.exit(f"architecture_check: {folder} may include '{a}', which does not stand above it")
    return table


def sources(folder):
    return sorted(p for p in (ROOT / folder).rglob("*") if p.suffix in (".h", ".cc"))


def check_includes(table):
    errors = []
    for folder, (allowed, _) in table.items():
        for path in sources(folder):
            for inc in INCLUDE.findall(path.read_text()):
                top = inc.split("/", 1)[0]
                if "/" not in inc or top == folder or top not in table:
                    continue
                if top not in allowed:
                    errors.append(f"{path.relative_to(ROOT)}: includes \"{inc}\": {folder}/ may not include {top}/ "
                                  f"(docs/architecture.md allows: {', '.join(sorted(allowed)) or 'nothing'})")
    return errors


def target_sources(folder, target):
    cmake = (ROOT / folder / "CMakeLists.txt").read_text()
    m = re.search(r"gpuslice_library\(\s*" + re.escape(target) + r"\s+SOURCES(.*?)(DEPS|\))", cmake, re.S)
    if not m:
        return None
    return [ROOT / folder / s for s in m.group(1).split()]


def check_pure(table):
    errors = []
    for folder, (_, pure) in table.items():
        for target, kind in pure:
            srcs = target_sources(folder, target)
            if srcs is None:
                errors.append(f"{folder}/CMakeLists.txt: pure target {target} from docs/architecture.md not found")
                continue
            todo = list(srcs) + [s.with_suffix(".h") for s in srcs if s.with_suffix(".h").exists()]
            seen = set()
            while todo:
                path = todo.pop()
                if path in seen or not path.exists():
                    continue
                seen.add(path)
                text = path.read_text()
                for inc in SYSTEM_INCLUDE.findall(text):
                    if inc.startswith(FORBIDDEN_SYSTEM):
                        errors.append(f"{path.relative_to(ROOT)}: <{inc}> inside pure target {target}")
                for n, line in enumerate(text.splitlines() if kind == "pure" else [], 1):
                    if CLOCK_READ.search(line.split("//", 1)[0]):
                        errors.append(f"{path.relative_to(ROOT)}:{n}: reads the clock inside pure target {target}")
                todo.extend(ROOT / inc for inc in INCLUDE.findall(text))
    return errors


def main():
    table = read_table()
    which = sys.argv[1:] or ["includes", "pure"]
    errors = []
    if "includes" in which:
        errors += check_includes(table)
    if "pure" in which:
        errors += check_pure(table)
    for e in errors:
        print(e)
    if errors:
        return 1
    print(f"architecture_check: {', '.join(which)}: {len(table)} folders conform to docs/architecture.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
