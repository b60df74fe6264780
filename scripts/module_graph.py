#!/usr/bin/env python3
"""Prints src/'s `crate::` import graph and its strongly connected components.

One node per file under src/ (src/a/mod.rs is module `a`, src/a/b.rs is
`a::b`). An edge a -> b means a file names `crate::b...` (in a `use`, grouped
`use crate::{..}` trees included, or inline in code). A path is resolved to
the longest module that has a file, so `crate::ops::norm::LAYERNORM_EPS`
points at ops/norm.rs and `crate::ops::Op` at ops/mod.rs. Comments are
ignored. `super::` paths and paths through a file's own child modules
(`mod x;` then `x::f`) count the same way as `crate::` ones, since they are
imports too. Items under `#[cfg(test)]` are skipped (the test modules'
imports are not part of the library's structure), and a path through a
`pub use` re-export of src/lib.rs (`crate::Context`) points at the module
it re-exports from; lib.rs itself only declares and re-exports, so it is
not a node.

Prints every cycle group (strongly connected component of more than one
file) with its files and line counts, the largest first, then a final line
`largest_scc_lines=<n>`. Python 3 standard library only.

Usage: python3 scripts/module_graph.py [--edges] [src-dir]
"""

import os
import re
import sys


def module_of(src, path):
    rel = os.path.relpath(path, src)[:-3].split(os.sep)
    if rel[-1] == "mod":
        rel = rel[:-1]
    if rel == ["lib"]:
        return "lib"
    return "::".join(rel)


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    out = []
    for line in text.splitlines():
        # Drop // comments outside string literals (good enough for this code).
        i, in_str = 0, False
        while i < len(line):
            ch = line[i]
            if ch == '"' and (i == 0 or line[i - 1] != "\\"):
                in_str = not in_str
            if not in_str and line.startswith("//", i):
                line = line[:i]
                break
            i += 1
        out.append(line)
    return "\n".join(out)


def strip_test_items(text):
    """Removes every item that follows `#[cfg(test)]` (to its `;` or its
    matching closing brace)."""
    out, i = [], 0
    while True:
        j = text.find("#[cfg(test)]", i)
        if j < 0:
            out.append(text[i:])
            return "".join(out)
        out.append(text[i:j])
        k = j + len("#[cfg(test)]")
        while k < len(text) and text[k] not in "{;":
            k += 1
        if k < len(text) and text[k] == "{":
            depth = 0
            while k < len(text):
                if text[k] == "{":
                    depth += 1
                elif text[k] == "}":
                    depth -= 1
                    if depth == 0:
                        break
                k += 1
        i = k + 1


IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def parse_tree(text, i, prefix, paths):
    """Parses a use tree starting at text[i] (after `crate::` or `{`)."""
    segs = list(prefix)
    while i < len(text):
        while i < len(text) and text[i].isspace():
            i += 1
        if i < len(text) and text[i] == "{":
            i += 1
            while True:
                i = parse_tree(text, i, segs, paths)
                while i < len(text) and text[i].isspace():
                    i += 1
                if i < len(text) and text[i] == ",":
                    i += 1
                    while i < len(text) and text[i].isspace():
                        i += 1
                    if i < len(text) and text[i] == "}":
                        return i + 1
                    continue
                if i < len(text) and text[i] == "}":
                    return i + 1
                return i
        m = IDENT.match(text, i)
        if not m:
            paths.append(segs)
            return i
        segs = segs + [m.group(0)]
        i = m.end()
        if text.startswith("::", i):
            i += 2
            continue
        paths.append(segs)
        return i
    paths.append(segs)
    return i


def strongly_connected(edges):
    """The strongly connected components of the graph {node: successors}
    (each successor a node), each sorted, in the order Tarjan's algorithm
    completes them, nodes and successors taken in sorted order. Iterative,
    so a long path meets no recursion limit. c_call_graph.py uses it too."""
    index, low, on, stack, work, sccs = {}, {}, set(), [], [], []

    def enter(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        work.append((v, iter(sorted(edges[v]))))

    for v0 in sorted(edges):
        if v0 in index:
            continue
        enter(v0)
        while work:
            v, successors = work[-1]
            for w in successors:
                if w not in index:
                    enter(w)
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:  # every successor done: v is finished
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    sccs.append(sorted(comp))
    return sccs


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    show_edges = "--edges" in sys.argv
    src = args[0] if args else os.path.join(os.path.dirname(__file__), "..", "src")
    src = os.path.normpath(src)
    files = {}
    for root, _, names in os.walk(src):
        for n in names:
            if n.endswith(".rs"):
                p = os.path.join(root, n)
                files[module_of(src, p)] = p
    # Names lib.rs re-exports: name -> module path segments.
    reexport = {}
    lib_text = strip_comments(open(files["lib"], encoding="utf-8").read())
    for use in re.finditer(r"pub use ([\w:]+)::\{([^}]*)\};|pub use ([\w:]+)::(\w+);", lib_text):
        mod = (use.group(1) or use.group(3)).split("::")
        for name in (use.group(2) or use.group(4)).split(","):
            if name.strip():
                reexport[name.strip()] = mod
    del files["lib"]
    lines = {m: sum(1 for _ in open(p, encoding="utf-8")) for m, p in files.items()}
    edges = {m: set() for m in files}
    for m, p in files.items():
        text = strip_test_items(strip_comments(open(p, encoding="utf-8").read()))
        base = m.split("::")
        # A file's own module path, for `super::`: src/a/b.rs is a::b and
        # its parent is a; src/a/mod.rs is a and its parent the crate.
        parent = base[:-1]
        children = re.findall(r"^\s*(?:pub(?:\([a-z]+\))?\s+)?mod\s+(\w+)\s*;", text, flags=re.M)
        starts = [(r"\bcrate::", [])] + [(r"(?<![\w:])super::", parent)]
        starts += [(r"(?<![\w:])" + c + r"::", base + [c]) for c in children]
        hits = []
        for pat, prefix in starts:
            for hit in re.finditer(pat, text):
                first = [] if pat == r"\bcrate::" or "super" in pat else [prefix[-1]]
                hits.append((hit.end(), prefix if not first else prefix[:-1], first))
        for end, prefix, first in hits:
            paths = []
            parse_tree(text, end, prefix + first, paths)
            for segs in paths:
                if segs and segs[0] in reexport:
                    segs = reexport[segs[0]] + segs[1:]
                # Longest prefix that is a module with a file.
                target = None
                for k in range(len(segs), 0, -1):
                    cand = "::".join(segs[:k])
                    if cand in files:
                        target = cand
                        break
                if target is not None and target != m:
                    edges[m].add(target)

    sccs = strongly_connected(edges)

    total = sum(lines.values())
    print(f"src/: {len(files)} files, {total} lines")
    if show_edges:
        for m in sorted(edges):
            print(f"  {m} -> {', '.join(sorted(edges[m])) or '(nothing)'}")
    cycles = sorted(
        (c for c in sccs if len(c) > 1), key=lambda c: -sum(lines[m] for m in c)
    )
    for c in cycles:
        size = sum(lines[m] for m in c)
        print(f"cycle group of {len(c)} files, {size} lines:")
        for m in c:
            inner = sorted(edges[m] & set(c))
            print(f"  {m} ({lines[m]}) -> {', '.join(inner)}")
    largest = max((sum(lines[m] for m in c) for c in sccs), default=0)
    print(f"largest_scc_lines={largest}")


if __name__ == "__main__":
    main()
