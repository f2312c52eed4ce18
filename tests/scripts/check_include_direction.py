#!/usr/bin/env python3
"""The include direction of docs/architecture.md, checked over every #include line of the tree:

  bindings -> capi -> core -> kernels -> io -> base, never the other way (samples, bench,
  tests and fuzz may use anything); inside core/ a folder includes only folders listed before
  it: tensor, comm, parallel, pipeline, params, layers, model, optim, data, checkpoint, args,
  plan, train (so layers never include model/, pipeline/ knows no model, plan sits below the
  training loop that runs it); nothing in kernels/ includes core/; no CUDA header in core/
  outside comm/nccl/.

  check_include_direction.py SOURCE_DIR   exit 1 naming every offending file:line
  check_include_direction.py --self-test  builds a small tree that breaks each rule once (and
                                          keeps one of each allowed direction) and checks that
                                          exactly the broken includes are refused
"""
import os
import re
import sys

CORE_ORDER = ["tensor", "comm", "parallel", "pipeline", "params", "layers", "model", "optim", "data",
              "checkpoint", "args", "plan", "train"]
LAYERS = ["base", "io", "kernels", "core", "capi", "bindings"]  # each may include only itself and those before it
INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^">]+)[">]')
CUDA_HEADERS = re.compile(r"^(cuda|cublas|cublasLt|nccl|cuda_runtime|cuda_bf16|cuda_fp16)[a-zA-Z_]*\.h$")


def top(path):
    return path.split("/", 1)[0]


def check(root):
    """Every include of the tree at `root` against the direction: (problems, files checked)."""
    problems = []
    checked = 0
    for base in LAYERS:
        for dirpath, dirnames, files in os.walk(os.path.join(root, base)):
            dirnames[:] = [d for d in dirnames if d not in ("target", "generated")]
            for name in files:
                if not name.endswith((".h", ".hpp", ".cpp", ".cc", ".c", ".cu", ".cuh", ".i")):
                    continue
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, root).replace(os.sep, "/")
                with open(path, encoding="utf-8", errors="replace") as f:
                    lines = f.readlines()
                checked += 1
                for number, line in enumerate(lines, 1):
                    m = INCLUDE.match(line)
                    if not m:
                        continue
                    target = m.group(1)
                    where = f"{rel}:{number}: #include \"{target}\""
                    mine, theirs = top(rel), top(target)
                    if theirs in LAYERS and LAYERS.index(theirs) > LAYERS.index(mine):
                        problems.append(f"{where}: {mine}/ may not include {theirs}/ "
                                        f"({' -> '.join(reversed(LAYERS))})")
                    if mine == "core" and theirs == "core":
                        a, b = rel.split("/")[1], target.split("/")[1]
                        if a in CORE_ORDER and b in CORE_ORDER and CORE_ORDER.index(b) > CORE_ORDER.index(a):
                            problems.append(f"{where}: core/{a}/ may not include core/{b}/, a folder above it "
                                            f"(docs/architecture.md's order: {', '.join(CORE_ORDER)})")
                        elif a not in CORE_ORDER:
                            problems.append(f"{where}: core/{a}/ is not a folder of docs/architecture.md's layout")
                    if mine == "core" and not rel.startswith("core/comm/nccl/") and CUDA_HEADERS.match(target):
                        problems.append(f"{where}: a CUDA header in core/ outside comm/nccl/")
    return problems, checked


def self_test():
    import tempfile
    files = {
        # broken, each once
        "core/pipeline/bad_pipeline.h": '#include "core/model/gpt.h"',
        "kernels/bad_kernel.h": '#include "core/tensor/tensor.h"',
        "base/bad_base.h": '#include "io/file_read.h"',
        "core/tensor/bad_cuda.cpp": "#include <cuda_runtime.h>",
        "core/train/bad_capi.cpp": '#include "capi/src/api_guard.h"',
        "core/nowhere/bad_folder.h": '#include "core/tensor/tensor.h"',
        # allowed
        "core/model/ok_model.h": '#include "core/layers/attention.h"\n#include "base/error.h"',
        "core/train/ok_train.cpp": '#include "core/plan/planner.h"\n#include "io/json_read.h"',
        "io/ok_io.h": '#include "base/error.h"',
        "capi/src/ok_capi.cpp": '#include "core/train/training_loop.h"',
        "core/comm/nccl/ok_nccl.cpp": "#include <nccl.h>",
    }
    with tempfile.TemporaryDirectory() as root:
        for rel, text in files.items():
            os.makedirs(os.path.dirname(os.path.join(root, rel)), exist_ok=True)
            with open(os.path.join(root, rel), "w", encoding="utf-8") as f:
                f.write(text + "\n")
        problems, checked = check(root)
    for p in problems:
        print(p)
    refused = sorted(p.split(":", 1)[0] for p in problems)
    expected = sorted(rel for rel in files if "/bad_" in rel)
    if checked != len(files) or refused != expected:
        print(f"self-test FAILED: refused {refused}, expected {expected} ({checked} files checked)")
        return 1
    print(f"self-test: the {len(expected)} broken includes refused, the {len(files) - len(expected)} allowed ones kept")
    return 0


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    problems, checked = check(os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "."))
    for p in problems:
        print(p)
    print(f"{checked} files checked, {len(problems)} includes against the direction")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
