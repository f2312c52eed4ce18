#!/usr/bin/env python3
"""Every ctest entry that runs a Catch2 program must run exactly one test case: ctest's
discovery splits a test name at ';' (and a renamed or deleted case leaves an entry behind),
and such an entry would run nothing and report Passed. For each entry labelled `catch` (the
ones tests/CMakeLists.txt's ptdp_add_catch_test registers), the program's own list of test
names must hold exactly one name that the entry's filter selects, and the entry must pass
Catch2's `--warn NoTests` (so that a filter selecting nothing fails when it runs).

  check_test_entries.py CTEST BUILD_DIR    exit 1 naming every entry that would run nothing
"""
import json
import subprocess
import sys


def unescape(filter_text):
    # catch_discover_tests escapes ',' (Catch's "or") and a few others with a backslash.
    out, i = [], 0
    while i < len(filter_text):
        if filter_text[i] == "\\" and i + 1 < len(filter_text):
            i += 1
        out.append(filter_text[i])
        i += 1
    return "".join(out)


def main():
    ctest, build = sys.argv[1], sys.argv[2]
    listing = json.loads(subprocess.run([ctest, "--show-only=json-v1"], cwd=build, check=True,
                                        stdout=subprocess.PIPE, text=True).stdout)
    names_of = {}
    problems, checked = [], 0
    for test in listing.get("tests", []):
        props = {p["name"]: p["value"] for p in test.get("properties", [])}
        labels = props.get("LABELS", [])
        if "catch" not in labels:
            continue
        command = test.get("command", [])
        if len(command) < 2:
            problems.append(f"{test['name']}: a Catch2 entry without a test-name filter: {command}")
            continue
        program, wanted = command[0], unescape(command[1])
        if program not in names_of:
            p = subprocess.run([program, "--list-test-names-only"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
            names_of[program] = [l.strip() for l in p.stdout.splitlines() if l.strip()]
        matches = [n for n in names_of[program] if n == wanted]
        checked += 1
        if len(matches) != 1:
            problems.append(f"{test['name']}: runs {len(matches)} test cases of {program} "
                            f"(filter {command[1]!r}); a name with ';' or a stale entry?")
        if "--warn" not in command or "NoTests" not in command:
            problems.append(f"{test['name']}: runs without --warn NoTests, so a filter that selects nothing passes")
    for p in problems:
        print(p)
    print(f"{checked} Catch2 entries checked, {len(problems)} problems")
    if checked == 0:
        print("no entry is labelled catch: the check itself is broken")
        return 1
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
