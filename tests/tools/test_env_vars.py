#!/usr/bin/env python3
"""Every documented environment variable and flag takes effect (ctest labels "tools;mpi").

    test_env_vars.py BIN_DIR SOURCE_DIR CASE

CASE is one of:
  comm_timeout  PTDP_COMM_TIMEOUT_S=2 with ptdp-train on 2 ranks (no --comm-timeout): rank 1 is
                stopped (SIGSTOP) mid-run; the job must end within seconds with rank 0's timeout
                message ("timed out after 2 s"), not after the 300 s default. With
                PTDP_FLIGHT_RECORDER_DIR set, rank 0 writes its flight record and
                ptdp-flight-analyze names rank 1. --comm-timeout 3 wins over PTDP_COMM_TIMEOUT_S=100.
                A bad PTDP_COMM_TIMEOUT_S is refused with a message naming it.
  progress      PTDP_PROGRESS=1 draws the progress bar under mpiexec (carriage returns in stdout);
                PTDP_PROGRESS=0 and unset do not.
  flight_entries  PTDP_FLIGHT_RECORDER_ENTRIES sets the ring: 0 records nothing, 5 keeps 5 entries
                (read back from the record of a timed-out run); a bad value is reported.
  docs          every --flag that docs/guides/ptdp-train.md names is in ptdp-train's flag table
                (--help) and every flag of the table is documented there; every PTDP_* variable
                the code reads is documented in docs/guides, and every variable of the
                environment table in docs/guides/multi-node.md is read by the code.
"""
import glob
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import uuid

BIN = sys.argv[1]
SRC = sys.argv[2]
CASE = sys.argv[3]
MPIEXEC = os.environ.get("MPIEXEC", "mpiexec")
TRAIN = os.path.join(BIN, "ptdp-train")
ANALYZE = os.path.join(BIN, "ptdp-flight-analyze")
WORK = tempfile.mkdtemp(prefix="ptdp-env-test-")
failures = []

# A tiny model on mock data with data parallelism over 2 ranks; many iterations, so a run only
# ends when a rank stops it.
TINY = ["--num-layers", "2", "--hidden-size", "16", "--num-attention-heads", "2", "--seq-length", "8",
        "--vocab-size", "64", "--make-vocab-size-divisible-by", "64", "--micro-batch-size", "1",
        "--global-batch-size", "2", "--lr", "1e-3", "--mock-data", "--log-interval", "1", "--eval-interval", "0"]


def check(ok, what):
    if not ok:
        failures.append(what)
        print("FAIL:", what)
    return ok


def base_env(extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PTDP_")}
    env["OMP_NUM_THREADS"] = "1"
    env.update(extra)
    return env


def mpi(np, flags):
    return [MPIEXEC, "--oversubscribe", "--allow-run-as-root", "-n", str(np), TRAIN] + flags


def rank_pid(marker, rank):
    """The pid of ptdp-train's `rank` in the job whose environment carries `marker`."""
    for d in glob.glob("/proc/[0-9]*"):
        try:
            env = open(d + "/environ", "rb").read().split(b"\0")
            if marker.encode() in env and f"OMPI_COMM_WORLD_RANK={rank}".encode() in env and \
                    os.path.basename(os.readlink(d + "/exe")) == "ptdp-train":
                return int(os.path.basename(d))
        except OSError:
            continue
    return None


def run_and_stop(env_extra, flags, stop_after_iteration=2, limit=60):
    """Runs ptdp-train on 2 ranks, stops rank 1 after an iteration was logged; returns
    (stdout, stderr, seconds from the stop to the end of the job, returncode)."""
    marker = "PTDP_TEST_MARKER=" + uuid.uuid4().hex
    env = base_env(env_extra)
    env["PTDP_TEST_MARKER"] = marker.split("=", 1)[1]
    out_path, err_path = os.path.join(WORK, "out.txt"), os.path.join(WORK, "err.txt")
    with open(out_path, "w") as out, open(err_path, "w") as err:
        p = subprocess.Popen(mpi(2, TINY + ["--train-iters", "100000"] + flags), stdout=out, stderr=err, env=env)
        start = time.time()
        stopped_pid, stopped_at = None, None
        while p.poll() is None and time.time() - start < limit:
            if stopped_pid is None:
                text = open(out_path).read()
                if re.search(r"iteration\s+%d/" % stop_after_iteration, text):
                    stopped_pid = rank_pid(marker, 1)
                    if stopped_pid:
                        os.kill(stopped_pid, signal.SIGSTOP)
                        stopped_at = time.time()
            time.sleep(0.05)
        took = time.time() - stopped_at if stopped_at else None
        if p.poll() is None:
            p.kill()
        if stopped_pid:
            for sig in (signal.SIGCONT, signal.SIGKILL):
                try:
                    os.kill(stopped_pid, sig)
                except OSError:
                    pass
        p.wait()
    return open(out_path).read(), open(err_path).read(), took, p.returncode


def case_comm_timeout():
    flight = os.path.join(WORK, "flight")
    os.makedirs(flight)
    out, err, took, rc = run_and_stop({"PTDP_COMM_TIMEOUT_S": "2", "PTDP_FLIGHT_RECORDER_DIR": flight}, [])
    print(err[-2000:])
    check(took is not None, "rank 1 was stopped after iteration 2:\n" + out[-1000:] + err[-1000:])
    if took is not None:
        # 2 s deadline, then one more deadline of waiting for the others' records; generous slack.
        check(took < 20, f"the job ends within seconds of the stop with PTDP_COMM_TIMEOUT_S=2 (took {took:.1f} s)")
    check(rc != 0, "the job fails")
    check("timed out after 2 s" in err, "the timeout message gives PTDP_COMM_TIMEOUT_S's 2 s")
    check("rank 0" in err, "the timeout message names rank 0")
    check(os.path.exists(os.path.join(flight, "flight-rank00000.json")), "rank 0 wrote its flight record")
    a = subprocess.run([ANALYZE, flight], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
    print(a.stdout)
    check(a.returncode == 1, "ptdp-flight-analyze finds a culprit (status 1)")
    check("culprit: rank 1" in a.stdout, "ptdp-flight-analyze names the stopped rank 1")

    # The flag wins over the variable.
    out, err, took, rc = run_and_stop({"PTDP_COMM_TIMEOUT_S": "100"}, ["--comm-timeout", "3"])
    check(took is not None and took < 20, f"--comm-timeout 3 ends the job soon (took {took})")
    check("timed out after 3 s" in err, "--comm-timeout 3 wins over PTDP_COMM_TIMEOUT_S=100:\n" + err[-1500:])

    # A bad value is refused, naming the variable.
    p = subprocess.run(mpi(1, TINY + ["--train-iters", "1"]), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, env=base_env({"PTDP_COMM_TIMEOUT_S": "soon"}), timeout=120)
    check(p.returncode != 0 and "PTDP_COMM_TIMEOUT_S" in p.stderr and "soon" in p.stderr,
          "PTDP_COMM_TIMEOUT_S=soon is refused naming the variable:\n" + p.stderr[-1000:])


def case_progress():
    def stdout_with(value):
        env = base_env({} if value is None else {"PTDP_PROGRESS": value})
        # Bytes: text mode would turn the bar's carriage returns into newlines.
        p = subprocess.run(mpi(1, TINY + ["--train-iters", "3"]), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           env=env, timeout=120)
        check(p.returncode == 0, f"ptdp-train runs with PTDP_PROGRESS={value}:\n" + p.stderr.decode()[-1000:])
        return p.stdout
    check(b"\r [" in stdout_with("1"), "PTDP_PROGRESS=1 draws the progress bar under mpiexec")
    check(b"\r" not in stdout_with("0"), "PTDP_PROGRESS=0 draws no progress bar")
    check(b"\r" not in stdout_with(None), "without PTDP_PROGRESS no bar under mpiexec")


def case_flight_entries():
    for entries, want in (("5", 5), ("0", 0)):
        flight = os.path.join(WORK, "flight-" + entries)
        os.makedirs(flight)
        out, err, took, rc = run_and_stop({"PTDP_COMM_TIMEOUT_S": "2", "PTDP_FLIGHT_RECORDER_DIR": flight,
                                           "PTDP_FLIGHT_RECORDER_ENTRIES": entries}, [])
        path = os.path.join(flight, "flight-rank00000.json")
        if check(os.path.exists(path), f"rank 0 wrote a record with PTDP_FLIGHT_RECORDER_ENTRIES={entries}"):
            rec = json.load(open(path))
            check(rec["capacity"] == want, f"PTDP_FLIGHT_RECORDER_ENTRIES={entries}: capacity {rec['capacity']}")
            check(len(rec["entries"]) == want, f"PTDP_FLIGHT_RECORDER_ENTRIES={entries}: {len(rec['entries'])} entries")
            check(rec["recorded"] > 5 if want else rec["recorded"] == 0, "operations counted as recorded")
    p = subprocess.run(mpi(1, TINY + ["--train-iters", "1"]), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, env=base_env({"PTDP_FLIGHT_RECORDER_ENTRIES": "many"}), timeout=120)
    check("PTDP_FLIGHT_RECORDER_ENTRIES" in p.stderr, "a bad PTDP_FLIGHT_RECORDER_ENTRIES is reported:\n" + p.stderr)


def case_docs():
    # Flags: the guide against the table (ptdp-train --help lists every flag of the table).
    help_text = subprocess.run([TRAIN, "--help"], stdout=subprocess.PIPE, text=True, timeout=60).stdout
    table = set(re.findall(r"^  (--[a-z0-9-]+)", help_text, re.M))
    check(len(table) > 50, f"--help lists the flag table ({len(table)} flags)")
    guide = open(os.path.join(SRC, "docs/guides/ptdp-train.md")).read()
    # The ptdp-generate section and the ptdp-plot paragraph document those tools' own flags, and
    # the exit-status paragraph shows a misspelt flag on purpose.
    guide = guide.split("\n## ptdp-generate", 1)[0]
    guide = "\n".join(line for line in guide.split("\n") if "ptdp-plot" not in line and "`--label`" not in line)
    guide = guide.replace("--hiden-size", "")
    # Launcher options in the guide's command lines are not ptdp-train's.
    launcher = {"--oversubscribe", "--allow-run-as-root", "--hostfile", "--map-by", "--bind-to", "--mpi",
                "--report-bindings", "--cpus-per-task", "--cpu-bind", "--np"}
    named = set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]+)", guide)) - launcher
    for flag in sorted(named - table):
        check(False, f"docs/guides/ptdp-train.md names {flag}, which is not a ptdp-train flag")
    for flag in sorted(table - named):
        check(False, f"ptdp-train's {flag} is not documented in docs/guides/ptdp-train.md")

    # Environment variables: read by the code <-> documented.
    read = set()
    for pattern in ("core/**/*.cpp", "core/**/*.h", "capi/**/*.cpp", "kernels/**/*.cpp", "kernels/**/*.h",
                    "samples/**/*.c"):
        for path in glob.glob(os.path.join(SRC, pattern), recursive=True):
            # env_switch_on (base/env_switch.h) reads an on/off variable.
            read |= set(re.findall(r'(?:getenv|env_switch_on)\("(PTDP_[A-Z0-9_]+)"\)',
                                   open(path, errors="replace").read()))
    for path in glob.glob(os.path.join(SRC, "bindings/**/*"), recursive=True):
        if os.path.isfile(path) and path.endswith((".py", ".rs", ".jl")) and "/generated/" not in path:
            text = open(path, errors="replace").read()
            read |= set(re.findall(r'(?:environ(?:\.get)?[\[(]|getenv\(|env::var\(|ENV\[|get\(ENV, )"(PTDP_[A-Z0-9_]+)"',
                                   text))
    check({"PTDP_COMM_TIMEOUT_S", "PTDP_FLIGHT_RECORDER_DIR", "PTDP_MEMORY_CHECK", "PTDP_CPU_HUGEPAGES"} <= read,
          f"the scan finds the code's reads: {read}")
    docs = ""
    for path in glob.glob(os.path.join(SRC, "docs/guides/*.md")):
        docs += open(path).read()
    for var in sorted(read):
        check(re.search(r"\b%s\b" % var, docs) is not None, f"{var} is read by the code but not documented in docs/guides")
    mn = open(os.path.join(SRC, "docs/guides/multi-node.md")).read()
    section = mn.split("## Environment variables", 1)[1].split("\n## ", 1)[0]
    table_vars = set(re.findall(r"^\| `(PTDP_[A-Z0-9_]+)`", section, re.M))
    check(len(table_vars) >= 4, f"multi-node.md's environment table lists the variables ({table_vars})")
    for var in sorted(table_vars - read):
        check(False, f"multi-node.md documents {var}, which no code reads")


{"comm_timeout": case_comm_timeout, "progress": case_progress, "flight_entries": case_flight_entries,
 "docs": case_docs}[CASE]()
print(f"{CASE}: {len(failures)} failed")
sys.exit(1 if failures else 0)
