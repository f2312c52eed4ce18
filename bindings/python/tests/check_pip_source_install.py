#!/usr/bin/env python3
"""`pip install` of the source tree, as a Python user does it: the top-level pyproject.toml
(scikit-build-core) builds libptdp and the extension from scratch and installs the package with
a wheel's layout into a fresh virtual environment; then a fresh interpreter there imports ptdp
and trains a tiny GPT for a few iterations, and the run's numbers and files are checked.

    check_pip_source_install.py --source ROOT --scratch DIR --from tree    pip install ROOT
    check_pip_source_install.py --source ROOT --scratch DIR --from sdist   python -m build --sdist
                                                                           ROOT, then pip install
                                                                           the ptdp-X.Y.Z.tar.gz

With --ccache DIR (and ccache on PATH) the compiles go through ccache with its cache in DIR,
and the build folder is placed so that the sdist's build sees its sources at the same relative
paths as the tree's build (--tree-build names the tree's build folder): the sdist check that runs
after the tree check then finds its objects in the cache when the files are the same, and still
compiles (and fails) where the sdist lacks or changes a file. When DIR is the cache of the
project's own build (PTDP_CCACHE) and --tree-build a folder beside that build, with the same
--define options and --generator, the tree's build finds the project build's objects too. A tree
build folder outside --scratch is removed when the check passes.

Nothing of a CMake build folder is used: pip's isolated build environment fetches
scikit-build-core (and cmake or ninja wheels where the system's are missing or too old), the
environment fetches numpy, both from the package index. Exit 77 (skipped) when python3 -m venv
does not work (Debian: python3-venv) or the index cannot be reached.
"""
import argparse
import glob
import os
import shutil
import subprocess
import sys
import tarfile
import textwrap
import time

SKIP = 77

parser = argparse.ArgumentParser()
parser.add_argument("--source", required=True, help="the project's root (holds pyproject.toml)")
parser.add_argument("--scratch", required=True, help="a folder this check may wipe")
parser.add_argument("--from", dest="origin", choices=("tree", "sdist"), default="tree")
parser.add_argument("--python", default=sys.executable, help="the interpreter the environment is made from")
parser.add_argument("--jobs", type=int, default=2, help="parallel compile jobs (CMAKE_BUILD_PARALLEL_LEVEL)")
parser.add_argument("--define", action="append", default=None, metavar="NAME=VALUE",
                    help="a CMake define for the build (default: PTDP_WITH_CUDA=OFF)")
parser.add_argument("--ccache", metavar="DIR",
                    help="compile through ccache (when on PATH) with its cache in DIR, shared by the tree and sdist checks")
parser.add_argument("--tree-build", metavar="DIR",
                    help="with --ccache: the build folder of the tree's install (the sdist's is placed to match)")
parser.add_argument("--generator", metavar="NAME",
                    help="the CMake generator of the build (CMAKE_GENERATOR; default: scikit-build-core's choice)")
parser.add_argument("--checks-only", action="store_true",
                    help="no venv, no install: check the environment a previous run left in --scratch")
args = parser.parse_args()
defines = args.define if args.define is not None else ["PTDP_WITH_CUDA=OFF"]

source = os.path.abspath(args.source)
scratch = os.path.abspath(args.scratch)
if not args.checks_only:
    shutil.rmtree(scratch, ignore_errors=True)
    os.makedirs(scratch)
venv = os.path.join(scratch, "venv")
python = os.path.join(venv, "bin", "python")

# A user's shell: nothing that would let the installed package lean on this build.
env = {k: v for k, v in os.environ.items()
       if k not in ("PYTHONPATH", "PYTHONHOME", "LD_LIBRARY_PATH", "CMAKE_ARGS", "VIRTUAL_ENV", "PIP_TARGET",
                    "PIP_PREFIX", "PIP_NO_INDEX", "PIP_NO_BUILD_ISOLATION")
       and not k.startswith("SKBUILD_")}
env.update(CMAKE_BUILD_PARALLEL_LEVEL=str(args.jobs), OMP_NUM_THREADS="1", PYTHONDONTWRITEBYTECODE="1",
           PIP_DISABLE_PIP_VERSION_CHECK="1")
if args.generator:
    env["CMAKE_GENERATOR"] = args.generator


def run(cmd, what, skip_on_failure=None, **kw):
    """Runs cmd in the scratch folder; prints its output when it fails (or always, with echo)."""
    print("+", " ".join(cmd), flush=True)
    start = time.monotonic()
    result = subprocess.run(cmd, cwd=scratch, env=env, capture_output=True, text=True, **kw)
    seconds = time.monotonic() - start
    if result.returncode != 0:
        print(result.stdout[-20000:], result.stderr[-20000:], sep="\n")
        if skip_on_failure:
            print(f"SKIPPED: {skip_on_failure}")
            sys.exit(SKIP)
        sys.exit(f"FAILED: {what} (exit status {result.returncode})")
    print(f"  {what}: {seconds:.0f} s", flush=True)
    return result


def make_venv():
    """1. A fresh virtual environment: no system site-packages, so numpy comes from the dependency."""
    run([args.python, "-m", "venv", venv], "python3 -m venv",
        skip_on_failure=f"{args.python} -m venv does not work here (Debian: apt-get install python3-venv)")
    # pip's own index (its configuration decides which); a short timeout, one retry.
    run([python, "-m", "pip", "download", "--no-deps", "--timeout", "20", "--retries", "1", "--dest",
         os.path.join(scratch, "probe"), "scikit-build-core"], "package index reachable",
        skip_on_failure="the package index (PyPI) cannot be reached; pip install of the source tree needs "
                        "scikit-build-core from it")


def build_sdist():
    """2. The sdist of the tree, checked to hold what the build needs and not the tests or builds."""
    run([python, "-m", "pip", "install", "build"], "pip install build")
    dist = os.path.join(scratch, "dist")
    run([python, "-m", "build", "--sdist", "--outdir", dist, source], "python -m build --sdist")
    sdists = glob.glob(os.path.join(dist, "ptdp-*.tar.gz"))
    if len(sdists) != 1:
        sys.exit(f"FAILED: expected one ptdp-*.tar.gz in {dist}, found {os.listdir(dist)}")
    with tarfile.open(sdists[0]) as tar:
        names = tar.getnames()
    top = names[0].split("/")[0]
    members = {n[len(top) + 1:] for n in names if n.startswith(top + "/")}
    needed = ["pyproject.toml", "CMakeLists.txt", "capi/include/ptdp/ptdp.h", "capi/ptdp.map",
              "bindings/python/CMakeLists.txt", "bindings/python/generated/ptdp_wrap.c",
              "bindings/python/generated/_ptdp.py", "bindings/python/ptdp/__init__.py",
              "bindings/python/README.md", "packaging/cmake/PtdpDependencies.cmake", "PKG-INFO"]
    missing = [n for n in needed if n not in members]
    stray = sorted({m.split("/")[0] + "/" for m in members if m.split("/")[0] in ("tests", "build", ".git", ".ci")}
                   | {m for m in members if "/build/" in "/" + m or m.endswith(".pyc")})
    print(f"  {os.path.basename(sdists[0])}: {len(members)} files, {os.path.getsize(sdists[0]) / 1e6:.1f} MB")
    if missing or stray:
        sys.exit(f"FAILED: the sdist lacks {missing} or holds what the build does not need: {stray[:10]}")
    return sdists[0]


def unpack_sdist(sdist):
    """The sdist unpacked at a depth that lets its build folder mirror the tree's (see ccache_layout)."""
    rel = os.path.relpath(os.path.abspath(args.tree_build), source)
    ups = len([p for p in rel.split(os.sep) if p == ".."])
    root = os.path.join(scratch, "src", *(["d"] * ups))
    with tarfile.open(sdist) as tar:
        top = tar.getnames()[0].split("/")[0]
        tar.extractall(root)
    return os.path.join(root, top)


def ccache_layout(project):
    """Defines and environment for compiling through ccache: the build folder of `project` sits
    where the tree's build folder sits relative to the tree, and ccache rewrites the absolute paths
    below their common folder to relative ones, so both builds hash the same command lines."""
    tree_build = os.path.abspath(args.tree_build)
    build = os.path.normpath(os.path.join(project, os.path.relpath(tree_build, source)))
    if not (build + os.sep).startswith(scratch + os.sep) and build != tree_build:
        sys.exit(f"FAILED: the mirrored build folder {build} would lie outside {scratch}")
    env.update(CCACHE_DIR=os.path.abspath(args.ccache), CCACHE_BASEDIR=os.path.commonpath([project, build]),
               CCACHE_NOHASHDIR="1", CCACHE_MAXSIZE="2G")
    if os.path.isdir(build):
        shutil.rmtree(build)
    return build, [f"CMAKE_{lang}_COMPILER_LAUNCHER=ccache" for lang in ("C", "CXX", "CUDA")]


def pip_install(target):
    """3. pip install: a from-scratch build in pip's isolated environment."""
    install = [python, "-m", "pip", "install", "--verbose", target]
    build_defines = list(defines)
    use_ccache = bool(args.ccache and args.tree_build and shutil.which("ccache"))
    if use_ccache:
        build_dir, launchers = ccache_layout(target)
        install.append(f"--config-settings=build-dir={build_dir}")
        build_defines += launchers
    install += [f"--config-settings=cmake.define.{d}" for d in build_defines]
    result = run(install, f"pip install ({args.origin}, CMAKE_BUILD_PARALLEL_LEVEL={args.jobs}, {' '.join(defines)}"
                          f"{', through ccache' if use_ccache else ''})")
    log = result.stdout + result.stderr
    with open(os.path.join(scratch, "pip-install.log"), "w", encoding="utf-8") as f:
        f.write(log)
    for line in log.splitlines():  # what the build found, for the record
        if ("ptdp " in line and "CUDA=" in line) or "Python bindings:" in line:
            print("  " + line.strip())
    if use_ccache:
        stats = subprocess.run(["ccache", "--print-stats"], env=env, capture_output=True, text=True).stdout
        counts = dict(line.split("\t", 1) for line in stats.splitlines() if "\t" in line)
        print(f"  ccache {env['CCACHE_DIR']}: {counts.get('direct_cache_hit', '?')} direct and "
              f"{counts.get('preprocessed_cache_hit', '?')} preprocessed hits, "
              f"{counts.get('cache_miss', '?')} misses (cumulative)")


if not args.checks_only:
    make_venv()
    if args.origin == "tree":
        pip_install(source)
    elif args.ccache and args.tree_build and shutil.which("ccache"):
        pip_install(unpack_sdist(build_sdist()))  # what pip does with the .tar.gz, in a known place
    else:
        pip_install(build_sdist())

# 4. The wheel's layout in site-packages: the library beside the extension, nothing outside ptdp/.
site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['platlib'])"],
                      env=env, capture_output=True, text=True, check=True).stdout.strip()
package = os.path.join(site, "ptdp")
library = os.path.join(package, "libptdp.so.0")
extensions = glob.glob(os.path.join(package, "_ptdp_ext*.so"))
problems = []
if not os.path.isfile(library) or os.path.islink(library):
    problems.append(f"no regular file {library}")
if len(extensions) != 1:
    problems.append(f"expected one _ptdp_ext*.so in {package}: {os.listdir(package)}")
for stray in ("lib", "lib64", "include", "bin", "share"):
    if os.path.exists(os.path.join(site, stray)):
        problems.append(f"{os.path.join(site, stray)} was installed (the wheel must keep everything in ptdp/)")
for name in ("libptdp.so", "libptdp.so.0." + "*"):
    problems += [f"{p} was installed" for p in glob.glob(os.path.join(package, name))]
records = glob.glob(os.path.join(site, "ptdp-*.dist-info", "RECORD"))
if len(records) != 1 or "ptdp/libptdp.so.0," not in open(records[0], encoding="utf-8").read():
    problems.append(f"the dist-info RECORD does not list ptdp/libptdp.so.0 ({records})")
readelf = shutil.which("readelf")
if readelf and extensions:
    dynamic = subprocess.run([readelf, "-d", extensions[0]], capture_output=True, text=True).stdout
    if "[$ORIGIN]" not in dynamic or "libptdp.so.0" not in dynamic:
        problems.append(f"{extensions[0]} does not load libptdp.so.0 through run path $ORIGIN:\n{dynamic}")
if problems:
    sys.exit("FAILED: " + "\n".join(problems))
print(f"  installed {package}: {', '.join(sorted(os.listdir(package)))}")

# 5. import ptdp; ptdp.train([...]) in a fresh interpreter, outside the source tree. The text
# is learnable, so a few iterations must lower the loss well below the first one.
work = os.path.join(scratch, "run")
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
with open(os.path.join(work, "corpus.txt"), "w", encoding="utf-8") as f:
    f.write("the quick brown fox jumps over the lazy dog.\n\n" * 600)  # 600 paragraphs: documents
iterations = 12
flags = ["--num-layers", "2", "--hidden-size", "32", "--num-attention-heads", "2", "--seq-length", "16",
         "--micro-batch-size", "2", "--global-batch-size", "4", "--train-iters", str(iterations), "--lr", "1e-2",
         "--hidden-dropout", "0", "--attention-dropout", "0", "--seed", "7", "--text-file", "corpus.txt",
         "--tokenizer-type", "ByteLevel", "--vocab-size", "256", "--eval-iters", "0", "--log-interval", "1", "--log-json",
         "train.jsonl", "--save", "checkpoints", "--save-interval", str(iterations)]
script = textwrap.dedent(f"""
    import json, math, os, sys
    import numpy
    import ptdp

    flags = {flags!r}
    site = {site!r}
    assert os.path.dirname(os.path.dirname(os.path.abspath(ptdp.__file__))) == site, ptdp.__file__
    from importlib.metadata import version
    assert ptdp.__version__ == version("ptdp"), (ptdp.__version__, version("ptdp"))
    print("imported ptdp", ptdp.__version__, "from", ptdp.__file__, flush=True)

    if callable(getattr(ptdp, "train", None)):  # (ptdp.train is also the name of a submodule)
        # The training loop every front end shares: its JSON lines and checkpoint files.
        print("ptdp.train(" + " ".join(flags) + ")", flush=True)
        returned = ptdp.train(flags)
        print("ptdp.train returned", repr(returned)[:200], flush=True)
        with open("train.jsonl", encoding="utf-8") as f:
            records = [json.loads(line) for line in f if line.strip()]
        losses = [r["lm_loss"] for r in records if "iteration" in r]
    else:
        # No ptdp.train in this version: the same run composed from the package's parts.
        print("ptdp.train is not there; composing TrainConfig, Model, Optimizer, train_iteration", flush=True)
        config = ptdp.TrainConfig(flags)
        s = config.settings()
        b, gb = s["micro_batch_size"], s["global_batch_size"]
        with ptdp.Runtime(None, config.runtime_options()) as rt, rt.groups(options=config.parallel_options()) as g, \\
                ptdp.Model(g, config.gpt_options()) as model, \\
                ptdp.Optimizer(model, config.optimizer_options()) as optimizer, \\
                ptdp.Schedule("1f1b", 1, gb // b) as schedule, ptdp.GPTData(config.data_options()) as data:
            losses = []
            for it in range(s["train_iters"]):
                tokens, labels = data.batch(it * gb, gb)
                losses.append(ptdp.train_iteration(model, optimizer, schedule, tokens, labels, b, it).loss)
                print(f" iteration {{it + 1}} | lm loss: {{losses[-1]:.6E}}", flush=True)
            ptdp.save_checkpoint("checkpoints", model, optimizer, config, iteration=len(losses),
                                 consumed_train_samples=len(losses) * gb)

    print("losses", " ".join(f"{{x:.4f}}" for x in losses), flush=True)
    assert len(losses) == {iterations}, losses
    assert all(math.isfinite(x) for x in losses), losses
    assert 4.0 < losses[0] < 7.0, losses                 # about ln(256) from a fresh initialisation
    assert losses[-1] < 0.75 * losses[0], losses         # it learns the repeated sentence
    assert sum(losses[-3:]) < sum(losses[:3]) - 1.5, losses
    step = "checkpoints/iter_{iterations:07d}"
    written = sorted(os.listdir(step))
    print(step, written, flush=True)
    assert "model_tp00_pp00.safetensors" in written and "metadata.json" in written, written
    with open("checkpoints/latest_checkpointed_iteration.txt", encoding="utf-8") as f:
        assert f.read().strip() == "{iterations}"
    options, iteration = ptdp.read_checkpoint_options("checkpoints")
    assert iteration == {iterations} and options["hidden_size"] == 32 and options["num_layers"] == 2, options
    print("pip-installed ptdp trained: loss", f"{{losses[0]:.4f}} -> {{losses[-1]:.4f}}")
""")
result = subprocess.run([python, "-c", script], cwd=work, env=env, capture_output=True, text=True, timeout=600)
print(result.stdout[-6000:], result.stderr[-6000:], sep="\n")
if result.returncode != 0:
    sys.exit(f"FAILED: import ptdp and training in {venv} (exit status {result.returncode})")
# A tree build folder outside the scratch folder (beside the project's build, see ccache_layout)
# goes once the check has passed; a failed check leaves it to look at.
if args.origin == "tree" and args.tree_build and not args.checks_only:
    tree_build = os.path.abspath(args.tree_build)
    if not (tree_build + os.sep).startswith(scratch + os.sep):
        shutil.rmtree(tree_build, ignore_errors=True)
print(f"pip install from the {args.origin}: passed")
