#!/usr/bin/env python3
"""On a machine without a GPU, every ctest entry labelled `gpu` must report skipped (exit 77,
the SKIP_RETURN_CODE of tests/CMakeLists.txt): an entry that passes there ran nothing on a
device, so the `gpu` label claims coverage it does not give (such host-only cases belong under
the `cuda` label). Runs each gpu entry's command as ctest would (its working directory and
environment) and checks the exit status; exits 77 itself where a GPU is present, since the gpu
entries legitimately pass there. Runs the commands directly rather than through a nested ctest,
which would share the outer run's Testing/ logs.

  check_gpu_entries.py CTEST BUILD_DIR    exit 1 naming every gpu entry that passed or failed
"""
import glob
import json
import os
import shutil
import subprocess
import sys

SKIP = 77


def gpu_present():
    if glob.glob("/dev/nvidia[0-9]*"):
        return True
    smi = shutil.which("nvidia-smi")
    if smi:
        p = subprocess.run([smi, "-L"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        return p.returncode == 0 and "GPU" in p.stdout
    return False


def main():
    ctest, build = sys.argv[1], sys.argv[2]
    if gpu_present():
        print("a GPU is present: the gpu entries run for real here; nothing to check")
        return SKIP
    listing = json.loads(subprocess.run([ctest, "--show-only=json-v1", "-L", "gpu"], cwd=build, check=True,
                                        stdout=subprocess.PIPE, text=True).stdout)
    problems, checked = [], 0
    for test in listing.get("tests", []):
        props = {p["name"]: p["value"] for p in test.get("properties", [])}
        if "gpu" not in props.get("LABELS", []) or props.get("DISABLED"):
            continue
        command = test.get("command")
        if not command:
            problems.append(f"{test['name']}: no command (is its program built?)")
            continue
        env = dict(os.environ)
        for item in props.get("ENVIRONMENT", []):
            key, _, value = item.partition("=")
            env[key] = value
        try:
            p = subprocess.run(command, cwd=props.get("WORKING_DIRECTORY", build), env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               timeout=float(props.get("TIMEOUT", 300)))
            code = p.returncode
        except subprocess.TimeoutExpired:
            code, p = None, None
        checked += 1
        if code == SKIP:
            continue
        if code == 0:
            problems.append(f"{test['name']}: passed without a GPU; a case that needs no device belongs under the "
                            "`cuda` label, not `gpu`")
        else:
            tail = "" if p is None else " | ".join(p.stdout.strip().splitlines()[-3:])
            problems.append(f"{test['name']}: exit {'timeout' if code is None else code} without a GPU, not the skip "
                            f"code {SKIP}: {tail}")
    for line in problems:
        print(line)
    print(f"{checked} gpu entries run without a GPU, {len(problems)} did not report skipped")
    if checked == 0:
        print("no entry is labelled gpu in this build: the check itself is broken")
        return 1
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
