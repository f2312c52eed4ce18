#!/usr/bin/env python3
"""`pip install bindings/python` works: installs a copy of the source folder (so the build's
by-products stay out of the tree) into a scratch folder with pip, against the header and library
given (PTDP_INCLUDE_DIR, PTDP_LIBRARY_DIR), and imports it from there in a fresh interpreter."""
import argparse
import os
import shutil
import subprocess
import sys

parser = argparse.ArgumentParser()
parser.add_argument("--source", required=True)
parser.add_argument("--include", required=True)
parser.add_argument("--library-dir", required=True)
parser.add_argument("--scratch", required=True)
args = parser.parse_args()

shutil.rmtree(args.scratch, ignore_errors=True)
source = os.path.join(args.scratch, "src")
target = os.path.join(args.scratch, "site")
shutil.copytree(args.source, source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__", "tests"))
env = dict(os.environ, PTDP_INCLUDE_DIR=args.include, PTDP_LIBRARY_DIR=args.library_dir)
env.pop("PYTHONPATH", None)
subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index",
                "--disable-pip-version-check", "--target", target, source], env=env, check=True)
check = ("import ptdp, numpy; t = ptdp.Tensor(numpy.arange(3, dtype=numpy.float32)); "
         "assert list(t.numpy()) == [0, 1, 2]; print('imported ptdp', ptdp.__version__, 'from', ptdp.__file__)")
result = subprocess.run([sys.executable, "-c", check], env=dict(env, PYTHONPATH=target), cwd=args.scratch,
                        capture_output=True, text=True)
print(result.stdout, result.stderr)
if result.returncode != 0 or target not in result.stdout:
    sys.exit("the pip-installed package did not import from " + target)
