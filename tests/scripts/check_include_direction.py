#!/usr/bin/env python3
"""The include direction of DESIGN.md, checked over every #include line of the tree:

  bindings -> capi -> core -> kernels, never the other way (samples, bench and tests may use
  anything); inside core/ a folder includes only folders listed before it in DESIGN.md's
  layout: tensor, comm, parallel, params, layers, model, pipeline, optim, data, checkpoint,
  args, train, plan (so layers never include model/, model never includes pipeline/);
  nothing in kernels/ includes core/; no CUDA header in core/ outside comm/nccl/.

  check_include_direction.py SOURCE_DIR   exit 1 naming every offending file:line
"""
import os
import re
import sys

CORE_ORDER = ["tensor", "comm", "parallel", "params", "layers", "model", "pipeline", "optim", "data",
              "checkpoint", "args", "train", "plan"]
LAYERS = ["kernels", "core", "capi", "bindings"]  # each may include only itself and those before it
INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^">]+)[">]')
CUDA_HEADERS = re.compile(r"^(cuda|cublas|cublasLt|nccl|cuda_runtime|cuda_bf16|cuda_fp16)[a-zA-Z_]*\.h$")


def top(path):
    return path.split("/", 1)[0]


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else ".")
    problems = []
    checked = 0
    for base in ("kernels", "core", "capi", "bindings"):
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
                        problems.append(f"{where}: {mine}/ may not include {theirs}/ (bindings -> capi -> core -> kernels)")
                    if mine == "core" and theirs == "core":
                        a, b = rel.split("/")[1], target.split("/")[1]
                        if a in CORE_ORDER and b in CORE_ORDER and CORE_ORDER.index(b) > CORE_ORDER.index(a):
                            problems.append(f"{where}: core/{a}/ may not include core/{b}/, a folder above it "
                                            f"(DESIGN.md's order: {', '.join(CORE_ORDER)})")
                        elif a not in CORE_ORDER:
                            problems.append(f"{where}: core/{a}/ is not a folder of DESIGN.md's layout")
                    if mine == "core" and not rel.startswith("core/comm/nccl/") and CUDA_HEADERS.match(target):
                        problems.append(f"{where}: a CUDA header in core/ outside comm/nccl/")
    for p in problems:
        print(p)
    print(f"{checked} files checked, {len(problems)} includes against the direction")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
