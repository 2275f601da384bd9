#!/usr/bin/env python3
"""tests/layers/layers.py ROOT [--dot] — the include graph between the rooms
of ROOT/shim (each directory is a room: shim/log, shim/coll, ...; the files
directly in shim/ are the core room) must have no circle.

A room A depends on room B when a file of A includes a header of B. A leaf
header (one that includes no header of the project: ncclshim.h, the public
API) adds no edge: nothing can reach back through it. Prints the rooms in an
order where each depends only on rooms before it, or, for every room on a
circle, a shortest circle through it (with the includes that make it) and
exits 1.

Must not: change anything; read more than ROOT/shim and ROOT/compress."""
import collections
import os
import re
import sys

INC = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def scan(root):
    rooms = {}  # file path -> room
    for d, _, files in os.walk(os.path.join(root, "shim")):
        for f in files:
            if f.endswith((".c", ".h")):
                rooms[os.path.join(d, f)] = os.path.relpath(d, root)
    for f in os.listdir(os.path.join(root, "compress")):
        if f.endswith((".c", ".h")):
            rooms[os.path.join(root, "compress", f)] = "compress"
    header = {}  # header name -> its path
    for p in rooms:
        if p.endswith(".h"):
            header[os.path.basename(p)] = p
    incs = {p: INC.findall(open(p, encoding="utf-8", errors="replace").read()) for p in rooms}
    leaf = {h for h, p in header.items() if not any(os.path.basename(i) in header for i in incs[p])}
    edges = collections.defaultdict(dict)  # room -> room -> first "file includes header"
    for p, names in incs.items():
        for n in names:
            h = os.path.basename(n)
            if h not in header or h in leaf:
                continue
            a, b = rooms[p], rooms[header[h]]
            if a != b:
                edges[a].setdefault(b, f"{os.path.relpath(p, root)} includes {h}")
    return sorted(set(rooms.values())), edges


def circles(nodes, edges):
    """For every room on a circle, a shortest circle through it (Tarjan's
    strongly connected components, then a breadth-first search back to each
    room of one), each set of rooms once, shortest first."""
    index, low, on, stack, comps, n = {}, {}, set(), [], [], [0]

    def strong(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, {}):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(sorted(comp))

    for v in nodes:
        if v not in index:
            strong(v)
    found = []
    for comp in comps:
        inside = set(comp)
        for start in comp:  # shortest circle back to start (breadth first)
            prev, queue = {start: None}, [start]
            while queue:
                v = queue.pop(0)
                for w in edges.get(v, {}):
                    if w not in inside:
                        continue
                    if w == start:
                        path = [v]
                        while prev[path[-1]] is not None:
                            path.append(prev[path[-1]])
                        path.reverse()
                        found.append(path)
                        queue = []
                        break
                    if w not in prev:
                        prev[w] = v
                        queue.append(w)
    seen, out = set(), []
    for c in sorted(found, key=len):
        key = frozenset(c)
        if key not in seen:
            seen.add(key)
            out.append(c)
    return out


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "."
    nodes, edges = scan(root)
    bad = circles(nodes, edges)
    if bad:
        for c in bad:
            hops = [f"{a} -> {c[(i + 1) % len(c)]} ({edges[a][c[(i + 1) % len(c)]]})" for i, a in enumerate(c)]
            print("circle: " + "; ".join(hops))
        return 1
    order, done = [], set()
    while len(order) < len(nodes):  # rooms whose dependencies are all listed
        for v in nodes:
            if v not in done and all(w in done for w in edges.get(v, {})):
                order.append(v)
                done.add(v)
    for v in order:
        print(f"{v} -> {', '.join(sorted(edges.get(v, {}))) or '(nothing)'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
