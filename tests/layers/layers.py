#!/usr/bin/env python3
"""tests/layers/layers.py ROOT [OBJ] [--no-config ROOM...] — the rooms of
ROOT/shim (each directory is a room: shim/log, shim/coll, ...; the files
directly in shim/ are the core room) must depend on each other without a
circle, by includes and by calls; and inside each room its files must call
each other without a circle too.

A room A depends on room B when a file of A includes a header of B, or when
an object of A (OBJ/shim/<room>/*.o, OBJ/compress/*.o; OBJ defaults to
ROOT/build/obj, and calls are read only where objects exist) leaves a
symbol undefined that an object of B defines (nm). Every header counts,
however little it includes. A function pointer one room hands another (a
handler table, an agreement's callbacks, a drop function set in an entry) is
not a call the objects show: those are the told-not-called direction by
design. Prints the rooms in an order where each depends only on rooms
before it, or, for every room on a circle, a shortest circle through it
(with the include or call that makes each step) and exits 1.

Inside a room, a file depends on another when its object needs a symbol the
other's object defines (includes are not counted there: a room's own header
serves all its files). A circle of files inside a room is printed as
"circle inside ROOM: a.o -> b.o (calls f); ..." and exits 1.

The configuration: a room reads it when a file of it includes a header of
shim/config, an object of it calls into shim/config, or an object of it
needs nsc_g (core.h: the process state that holds the parsed
configuration). The last line names those rooms ("configuration read by:
..."); with --no-config ROOM, a ROOM among them exits 1 (the executor's
room, shim/exec, reads none: its plans carry what it needs).

Must not: change anything; read more than ROOT/shim, ROOT/compress and OBJ."""
import collections
import os
import re
import subprocess
import sys

INC = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def scan(root, obj=None):
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
    edges = collections.defaultdict(dict)  # room -> room -> first "file includes header" / "object calls symbol"
    for p, names in incs.items():
        for n in names:
            h = os.path.basename(n)
            if h not in header:
                continue
            a, b = rooms[p], rooms[header[h]]
            if a != b:
                edges[a].setdefault(b, f"{os.path.relpath(p, root)} includes {h}")
    for a, b, why in calls(root, obj or os.path.join(root, "build", "obj"), set(rooms.values())):
        edges[a].setdefault(b, why)
    return sorted(set(rooms.values())), edges


_SYMS = {}  # object path -> (global symbols it defines, symbols it needs)


def _read_syms(paths):
    """One nm over every object not read yet (a process per object per
    question took most of this checker's time)."""
    todo = sorted(p for p in paths if p not in _SYMS)
    for p in todo:
        _SYMS[p] = ([], [])
    if not todo:
        return
    out = subprocess.run(["nm", "-A", *todo], capture_output=True, text=True).stdout
    for line in out.splitlines():
        path, _, rest = line.partition(":")
        f = rest.split()
        if path not in _SYMS or len(f) < 2:
            continue
        kind, sym = f[-2], f[-1]
        if kind in ("U", "w"):  # undefined, or weak undefined (as nm -u lists them)
            _SYMS[path][1].append(sym)
        elif kind.isupper():  # a global definition (T, D, B, R, W, V, ...)
            _SYMS[path][0].append(sym)


def nm(path, *flags):
    """nm's symbols of one object: "-g", "--defined-only" its global
    definitions, "-u" what it needs."""
    _read_syms([path])
    return list(_SYMS[path][1] if "-u" in flags else _SYMS[path][0])


def objects(obj, known):
    """object path -> room, for the objects of the known rooms under obj."""
    objs = {}  # object path -> room
    for d, _, files in os.walk(obj):
        rel = os.path.relpath(d, obj)
        room = "compress" if rel == "compress" else rel if rel in known else None
        if room is None:
            continue
        for f in files:
            if f.endswith(".o"):
                objs[os.path.join(d, f)] = room
    _read_syms(objs)
    return objs


def calls(root, obj, known):
    """(room A, room B, why) for every symbol an object of A needs that an
    object of B defines."""
    objs = objects(obj, known)
    where = {}  # symbol -> room defining it
    for o, room in objs.items():
        for sym in nm(o, "-g", "--defined-only"):
            where.setdefault(sym, room)
    out = []
    for o, room in sorted(objs.items()):
        for sym in nm(o, "-u"):
            b = where.get(sym)
            if b and b != room:
                out.append((room, b, f"{os.path.relpath(o, obj)} calls {sym}"))
    return out


def file_edges(obj, known):
    """room -> object -> object -> why, for every symbol an object needs that
    another object of its own room defines."""
    objs = objects(obj, known)
    where = {}  # (room, symbol) -> object defining it
    for o, room in objs.items():
        for sym in nm(o, "-g", "--defined-only"):
            where.setdefault((room, sym), o)
    edges = collections.defaultdict(lambda: collections.defaultdict(dict))
    for o, room in sorted(objs.items()):
        for sym in nm(o, "-u"):
            b = where.get((room, sym))
            if b and b != o:
                edges[room][os.path.basename(o)].setdefault(os.path.basename(b), f"calls {sym}")
    return edges


def config_readers(root, obj, known, edges):
    """The rooms that read the configuration (see the module's text), each
    with the first reason found."""
    out = {}
    for a, bs in edges.items():
        if "shim/config" in bs and a != "shim/config":
            out.setdefault(a, bs["shim/config"])
    for o, room in sorted(objects(obj, known).items()):
        if room != "shim" and "nsc_g" in nm(o, "-u"):
            out.setdefault(room, f"{os.path.relpath(o, obj)} needs nsc_g")
    return out


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


def hops(c, edges):
    return "; ".join(f"{a} -> {c[(i + 1) % len(c)]} ({edges[a][c[(i + 1) % len(c)]]})" for i, a in enumerate(c))


def main():
    args = sys.argv[1:]
    no_config = []
    while "--no-config" in args:
        i = args.index("--no-config")
        no_config.append(args[i + 1])
        del args[i:i + 2]
    root = args[0] if args else "."
    obj = args[1] if len(args) > 1 else os.path.join(root, "build", "obj")
    nodes, edges = scan(root, obj)
    bad = circles(nodes, edges)
    inside = []
    for room, fe in sorted(file_edges(obj, set(nodes)).items()):
        for c in circles(sorted(fe), fe):
            inside.append(f"circle inside {room}: " + hops(c, fe))
    if bad or inside:
        for c in bad:
            print("circle: " + hops(c, edges))
        for line in inside:
            print(line)
        return 1
    order, done = [], set()
    while len(order) < len(nodes):  # rooms whose dependencies are all listed
        for v in nodes:
            if v not in done and all(w in done for w in edges.get(v, {})):
                order.append(v)
                done.add(v)
    for v in order:
        print(f"{v} -> {', '.join(sorted(edges.get(v, {}))) or '(nothing)'}")
    readers = config_readers(root, obj, set(nodes), edges)
    print("no circle inside any room; configuration read by: " + ", ".join(sorted(readers)))
    rc = 0
    for room in no_config:
        if room in readers:
            print(f"reads the configuration: {room} ({readers[room]})")
            rc = 1
    return rc


if __name__ == "__main__":
    sys.exit(main())
