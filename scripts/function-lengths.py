#!/usr/bin/env python3
"""Lengths of the C and C++ functions of the tree, from clang's parse (libclang, Debian's
python3-clang-14), not from a guess at braces.

A function's length is the number of lines from the first line of its definition (return type
and name) to its closing brace, comments and blank lines included, as a reader scrolls it.
Lambdas and local classes count towards the function that holds them.

  function-lengths.py [--top K] [--max N] PATH...

PATH: files or folders (every .h, .cpp, .c, .cc of a folder, recursively). Prints the K longest
functions (default 20) as `LINES  FILE:LINE  NAME`; with --max N, exits 1 naming every function
longer than N lines. Run from the source tree's root (include paths are taken from there).
"""
import argparse
import os
import sys

try:
    import clang.cindex as cindex
except ImportError:  # Debian installs it for its own python3; a pyenv python of the same version can use it
    sys.path.append("/usr/lib/python3/dist-packages")
    import clang.cindex as cindex

SOURCES = (".h", ".cpp", ".c", ".cc")
KINDS = {
    cindex.CursorKind.FUNCTION_DECL,
    cindex.CursorKind.CXX_METHOD,
    cindex.CursorKind.CONSTRUCTOR,
    cindex.CursorKind.DESTRUCTOR,
    cindex.CursorKind.CONVERSION_FUNCTION,
    cindex.CursorKind.FUNCTION_TEMPLATE,
}
CONTAINERS = {
    cindex.CursorKind.NAMESPACE,
    cindex.CursorKind.CLASS_DECL,
    cindex.CursorKind.STRUCT_DECL,
    cindex.CursorKind.CLASS_TEMPLATE,
    cindex.CursorKind.UNEXPOSED_DECL,  # extern "C" { ... }
    cindex.CursorKind.LINKAGE_SPEC,
}


def load_library():
    if cindex.Config.loaded:
        return
    for path in ("/usr/lib/llvm-14/lib/libclang.so.1", "/usr/lib/x86_64-linux-gnu/libclang-14.so.1"):
        if os.path.exists(path):
            cindex.Config.set_library_file(path)
            return


def files_under(paths):
    for p in paths:
        if os.path.isfile(p):
            yield p
            continue
        for dirpath, dirnames, names in os.walk(p):
            dirnames[:] = sorted(d for d in dirnames if d not in ("generated", "target"))
            for name in sorted(names):
                if name.endswith(SOURCES):
                    yield os.path.join(dirpath, name)


def functions(index, path, root):
    lang = ["-x", "c"] if path.endswith(".c") else ["-x", "c++", "-std=c++20"]
    args = lang + ["-I" + root, "-I" + os.path.join(root, "capi", "include"), "-I/usr/lib/x86_64-linux-gnu/openmpi/include", "-DPTDP_HAVE_MPI=1",
                   "-I/usr/local/cuda/include"]
    tu = index.parse(path, args=args, options=cindex.TranslationUnit.PARSE_INCOMPLETE)
    real = os.path.realpath(path)

    def walk(cursor):
        for c in cursor.get_children():
            if c.location.file is None or os.path.realpath(c.location.file.name) != real:
                continue
            if c.kind in KINDS and c.is_definition():
                start, end = c.extent.start.line, c.extent.end.line
                parent = c.semantic_parent
                name = c.spelling
                if parent is not None and parent.kind in (cindex.CursorKind.CLASS_DECL, cindex.CursorKind.STRUCT_DECL,
                                                          cindex.CursorKind.CLASS_TEMPLATE):
                    name = f"{parent.spelling}::{name}"
                yield end - start + 1, start, name
            elif c.kind in CONTAINERS:
                yield from walk(c)

    yield from walk(tu.cursor)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--top", type=int, default=20)
    ap.add_argument("--max", type=int, default=0)
    ap.add_argument("paths", nargs="+")
    a = ap.parse_args()
    load_library()
    index = cindex.Index.create()
    root = os.getcwd()
    rows = []
    for path in files_under(a.paths):
        rel = os.path.relpath(path, root)
        for lines, line, name in functions(index, path, root):
            rows.append((lines, f"{rel}:{line}", name))
    rows.sort(key=lambda r: (-r[0], r[1]))
    for lines, where, name in rows[: a.top]:
        print(f"{lines:5d}  {where}  {name}")
    print(f"{len(rows)} functions")
    if a.max:
        over = [r for r in rows if r[0] > a.max]
        for lines, where, name in over:
            print(f"too long: {where} {name}: {lines} lines (at most {a.max})")
        if over:
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
