#!/usr/bin/env python3
"""File-level call graph of each C program in c_examples/; fails on a cycle.

    scripts/c_call_graph.py [--root DIR] [--quiet]

A program is a folder of .c files (train_full/, nuts/, common/tests/, ...)
or a single .c file at the top of the root. A program also takes in another folder of the
root when it includes one of that folder's headers: that folder's files
which define no `main` (train_full and common/, advi and nuts/), as the
Makefile links them. Headers that define functions (static inline helpers)
are nodes of the graph like the .c files.

Per file: the functions it defines (static or not) and the names it calls
(an identifier followed by `(` inside a body; member calls through `.` or
`->` and function pointers are not calls by name). A call from file A to a
function that A does not define itself, defined non-static in file B of the
same program, is an edge A -> B. Any cycle, two files calling each other
or longer, fails the check: the output names the files and the calls that
close it. Comments, strings, character constants and preprocessor lines
are skipped by a rough tokenizer (every branch of #if counts).

Exit status: 0 without a cycle, 1 with one, 2 on a usage error.
"""

import argparse
import os
import re
import sys

from module_graph import strongly_connected

KEYWORDS = {
    "if", "while", "for", "switch", "return", "sizeof", "do", "else", "case",
    "goto", "_Alignof", "alignof", "_Static_assert", "static_assert",
    "_Generic", "__attribute__", "__typeof__", "typeof", "asm", "__asm__",
    "defined", "_Pragma",
}

TOKEN = re.compile(
    r"""
      (?P<ws>\s+)
    | (?P<comment>//[^\n]*|/\*.*?\*/)
    | (?P<string>"(?:\\.|[^"\\\n])*")
    | (?P<char>'(?:\\.|[^'\\\n])*')
    | (?P<ident>[A-Za-z_][A-Za-z_0-9]*)
    | (?P<number>\.?[0-9](?:[eEpP][+-]|[A-Za-z0-9_.])*)
    | (?P<punct>->|\+\+|--|<<=|>>=|[<>=!+\-*/%&|^]=|&&|\|\||<<|>>|\.\.\.|.)
    """,
    re.VERBOSE | re.DOTALL,
)


def strip_directives(text):
    """Blanks preprocessor lines (with their continuations), keeping line numbers."""
    out = []
    in_directive = False
    in_comment = False
    for line in text.split("\n"):
        starts = not in_comment and line.lstrip().startswith("#")
        if in_directive or starts:
            in_directive = line.rstrip().endswith("\\")
            out.append("")
            continue
        # Track block comments so that a '#' inside one is not a directive.
        i = 0
        while i < len(line):
            if in_comment:
                j = line.find("*/", i)
                if j < 0:
                    break
                in_comment, i = False, j + 2
            else:
                j = line.find("/*", i)
                k = line.find("//", i)
                q = min(x for x in (j, k, len(line)) if x >= 0)
                if q == len(line) or q == k:
                    break
                in_comment, i = True, j + 2
        out.append(line)
    return "\n".join(out)


def tokens(text):
    """(kind, value, line) for identifiers and punctuation; the rest is dropped."""
    line = 1
    for m in TOKEN.finditer(strip_directives(text)):
        kind, value = m.lastgroup, m.group()
        if kind in ("ident", "punct"):
            yield kind, value, line
        elif kind in ("string", "char", "number"):
            yield "literal", "", line
        line += value.count("\n")


def scan(path):
    """Returns ({name: is_static}, {name: first line}) of a file's definitions
    and calls."""
    toks = list(tokens(open(path, encoding="utf-8", errors="replace").read()))
    defs, calls = {}, {}
    depth = 0
    decl_start = 0  # first token of the current top-level declaration
    i = 0
    while i < len(toks):
        kind, value, line = toks[i]
        if value == "{":
            if depth == 0:
                name = function_name(toks, decl_start, i)
                if name is not None:
                    words = {v for k, v, _ in toks[decl_start:i] if k == "ident"}
                    defs[name] = "static" in words
            depth += 1
        elif value == "}":
            depth = max(depth - 1, 0)
            if depth == 0:
                decl_start = i + 1
        elif value == ";" and depth == 0:
            decl_start = i + 1
        elif (
            kind == "ident"
            and depth > 0
            and value not in KEYWORDS
            and i + 1 < len(toks)
            and toks[i + 1][1] == "("
            and (i == 0 or toks[i - 1][1] not in (".", "->"))
        ):
            calls.setdefault(value, line)
        i += 1
    return defs, calls


def function_name(toks, start, brace):
    """The name of the function whose body opens at toks[brace], or None
    (a struct, union, enum or initializer brace)."""
    j = brace - 1
    # Attributes between the parameter list and the body.
    while j >= start and toks[j][1] == ")":
        open_at = matching_open(toks, start, j)
        if open_at is None:
            return None
        before = toks[open_at - 1][1] if open_at - 1 >= start else ""
        if before == "(" and open_at - 2 >= start and toks[open_at - 2][1] == "__attribute__":
            j = open_at - 3  # __attribute__((...))
            continue
        if open_at - 1 >= start and toks[open_at - 1][0] == "ident":
            name = toks[open_at - 1][1]
            return None if name in KEYWORDS else name
        return None
    return None


def matching_open(toks, start, close):
    depth = 0
    for k in range(close, start - 1, -1):
        if toks[k][1] == ")":
            depth += 1
        elif toks[k][1] == "(":
            depth -= 1
            if depth == 0:
                return k
    return None


INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.MULTILINE)


def includes(path):
    text = open(path, encoding="utf-8", errors="replace").read()
    here = os.path.dirname(path)
    for name in INCLUDE.findall(text):
        target = os.path.normpath(os.path.join(here, name))
        if os.path.isfile(target):
            yield target


def defines_main(path):
    return "main" in scan(path)[0]


def programs(root):
    """{program name: sorted file list} for the folders and top-level files."""
    root = os.path.normpath(root)
    units = {}
    for folder, subdirs, names in os.walk(root):
        subdirs.sort()
        files = [os.path.join(folder, f) for f in sorted(names) if f.endswith(".c")]
        if folder == root:
            for f in files:
                units[os.path.basename(f)[:-2]] = [f]
        elif files:
            units[os.path.relpath(folder, root)] = files
    result = {}
    for name, files in units.items():
        # A folder whose files define no main is a library that programs take
        # in; it is checked on its own as well.
        members = set(files)
        pending = list(files)
        while pending:
            f = pending.pop()
            for inc in includes(f):
                if inc not in members:
                    members.add(inc)
                    pending.append(inc)
                folder = os.path.dirname(inc)
                if folder == root or folder == os.path.dirname(f):
                    continue
                for other in sorted(os.listdir(folder)):
                    path = os.path.join(folder, other)
                    if other.endswith(".c") and path not in members and not defines_main(path):
                        members.add(path)
                        pending.append(path)
        result[name] = sorted(members)
    return result


def graph(files):
    """{file: {callee file: [function names]}}."""
    scanned = {f: scan(f) for f in files}
    owners = {}
    for f, (defs, _) in scanned.items():
        for name, is_static in defs.items():
            # A header's static inline functions are its includers' to call.
            if not is_static or f.endswith(".h"):
                owners.setdefault(name, []).append(f)
    edges = {f: {} for f in files}
    for f, (defs, calls) in scanned.items():
        for name in calls:
            if name in defs:
                continue  # its own (a static one shadows any other)
            for owner in owners.get(name, []):
                if owner != f:
                    edges[f].setdefault(owner, []).append(name)
    return edges


def components(edges):
    """The strongly connected components of more than one file."""
    return [part for part in strongly_connected(edges) if len(part) > 1]


def cycles_in(edges, part, limit=20):
    """Simple cycles [a, ..., a] inside one component, each once (it starts
    at its first file in sorted order), at most `limit` of them."""
    members = set(part)
    found = []

    def walk(path, start):
        for g in sorted(edges[path[-1]]):
            if len(found) >= limit or g not in members or g < start:
                continue
            if g == start:
                found.append(path + [g])
            elif g not in path:
                walk(path + [g], start)

    for start in part:
        walk([start], start)
    return found


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default=os.path.join(here, "..", "c_examples"))
    ap.add_argument("--quiet", action="store_true", help="print only cycles and the verdict")
    args = ap.parse_args()
    if not os.path.isdir(args.root):
        print(f"c_call_graph: {args.root} is not a folder", file=sys.stderr)
        return 2
    root = os.path.normpath(args.root)
    rel = lambda f: os.path.relpath(f, root)
    cycles = 0
    progs = programs(root)
    for name, files in progs.items():
        edges = graph(files)
        if not args.quiet:
            print(f"{name}: {len(files)} files")
            for f in sorted(edges):
                for g in sorted(edges[f]):
                    print(f"  {rel(f)} -> {rel(g)}: {', '.join(sorted(edges[f][g]))}")
        for part in components(edges):
            cycles += 1
            print(f"CYCLE in {name}: {', '.join(rel(f) for f in part)} call each other:")
            for cycle in cycles_in(edges, part):
                print("  " + " -> ".join(rel(f) for f in cycle))
                for a, b in zip(cycle, cycle[1:]):
                    print(f"    {rel(a)} -> {rel(b)}: {', '.join(sorted(edges[a][b]))}")
    if cycles:
        print(f"c_call_graph: {cycles} call cycle(s) among the files of {len(progs)} programs")
        return 1
    print(f"c_call_graph: {len(progs)} programs, no call cycle among their files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
