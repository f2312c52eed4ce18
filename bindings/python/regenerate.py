#!/usr/bin/env python3
"""Regenerates the committed SWIG output (generated/ptdp_wrap.c, generated/_ptdp.py) from
ptdp.i and the public header, or with --check verifies that the committed files are what SWIG
makes of them now (the ctest python_generated_fresh).

The committed files are what every build compiles, so `pip install bindings/python` needs no
SWIG. SWIG writes its version into both files; a SWIG other than the one that generated them
gives different text without anything being stale, so --check then reports a skip (exit 77)
instead of a failure.
"""
import argparse
import difflib
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
GENERATED = os.path.join(HERE, "generated")
FILES = ("ptdp_wrap.c", "_ptdp.py")
SKIP = 77


def swig_version(text):
    match = re.search(r"Version (\d+\.\d+\.\d+)", text)
    return match.group(1) if match else None


def generate(swig, outdir):
    # Run from this folder with relative paths, so that no absolute path enters the output.
    # SWIGWORDSIZE64: int64_t is long, as on every LP64 platform ptdp builds for.
    command = [swig, "-python", "-threads", "-doxygen", "-DSWIGWORDSIZE64", "-interface", "_ptdp_ext",
               "-I../../capi/include",
               "-o", os.path.join(outdir, "ptdp_wrap.c"), "-outdir", outdir, "ptdp.i"]
    subprocess.run(command, cwd=HERE, check=True)


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--swig", default=shutil.which("swig4.0") or shutil.which("swig") or "swig")
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        generate(args.swig, tmp)
        if not args.check:
            os.makedirs(GENERATED, exist_ok=True)
            for name in FILES:
                shutil.copyfile(os.path.join(tmp, name), os.path.join(GENERATED, name))
            print("regenerated", ", ".join(os.path.join("generated", n) for n in FILES))
            return 0
        stale = []
        for name in FILES:
            committed_path = os.path.join(GENERATED, name)
            fresh = read(os.path.join(tmp, name))
            committed = read(committed_path) if os.path.exists(committed_path) else ""
            if fresh == committed:
                continue
            if swig_version(fresh) != swig_version(committed) and committed:
                print(f"SKIP: generated/{name} was made by SWIG {swig_version(committed)}, this is SWIG "
                      f"{swig_version(fresh)}; regenerate with that version to compare")
                return SKIP
            stale.append(name)
            diff = difflib.unified_diff(committed.splitlines(), fresh.splitlines(), f"committed/{name}",
                                        f"fresh/{name}", lineterm="", n=2)
            print("\n".join(list(diff)[:60]))
        if stale:
            print(f"STALE: {', '.join(stale)} differ from what ptdp.i and ptdp.h generate; run "
                  f"bindings/python/regenerate.py and commit the result")
            return 1
        print("generated files are fresh")
        return 0


if __name__ == "__main__":
    sys.exit(main())
