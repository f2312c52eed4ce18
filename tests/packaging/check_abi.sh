#!/usr/bin/env bash
# Usage: check_abi.sh [--update] [-I DIR]... LIB BASELINE HEADER...
#
# Compares the ABI of LIB (libptdp.so.MAJOR.MINOR.PATCH) as its public HEADERs declare it with
# the stored BASELINE (an abi-compliance-checker dump, packaging/abi/ptdp.abi.xml), and fails
# on any binary or source incompatibility: a removed or changed function, a field removed,
# moved or retyped, an enum value renumbered. Additions pass: new functions, enum values at
# the end, fields appended to a struct (ACC reports those as warnings, which the struct_size
# protocol makes safe). An incompatible change passes only when the SONAME says it is one,
# that is when the headers' PTDP_VERSION_MAJOR (and with it libptdp.so.MAJOR) differs from the
# baseline's; the baseline is then due for a refresh.
#
# --update writes BASELINE from LIB and HEADERs instead (after a deliberate version bump; see
# packaging/abi/README.md), but not an ABI incompatible with the stored one under the same
# SONAME, nor one from a build that lacks one of its headers. -I adds an include directory the headers need (mpi.h for
# ptdp_mpi.h). A baseline header missing from HEADERs (ptdp_mpi.h in a build without MPI)
# has its functions left out of the comparison, and the output says so.
#
# Exits 77 (skipped) only when abi-compliance-checker or what it needs is not installed.
set -euo pipefail

update=0
includes=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --update) update=1; shift ;;
    -I) includes+=("$2"); shift 2 ;;
    -I*) includes+=("${1#-I}"); shift ;;
    *) break ;;
  esac
done
if [[ $# -lt 3 ]]; then
  echo "usage: $0 [--update] [-I DIR]... LIB BASELINE HEADER..." >&2
  exit 2
fi
lib=$(readlink -f "$1") baseline=$(readlink -m "$2")
shift 2
headers=()
for h in "$@"; do
  headers+=("$(readlink -f "$h")")
  includes+=("$(dirname "$(dirname "$(readlink -f "$h")")")")  # for #include "ptdp/ptdp.h"
done

for tool in abi-compliance-checker perl gcc readelf; do
  if ! command -v "$tool" >/dev/null; then
    echo "SKIP: $tool is not installed (Debian: apt-get install abi-compliance-checker; scripts/install-deps.sh)"
    exit 77
  fi
done

# The headers' version; the SONAME must carry its major (check_exports.sh checks the rest).
version_of() {
  local major minor patch
  major=$(sed -n 's/^#define PTDP_VERSION_MAJOR \([0-9]*\).*/\1/p' "$1")
  minor=$(sed -n 's/^#define PTDP_VERSION_MINOR \([0-9]*\).*/\1/p' "$1")
  patch=$(sed -n 's/^#define PTDP_VERSION_PATCH \([0-9]*\).*/\1/p' "$1")
  [[ -n "$major" && -n "$minor" && -n "$patch" ]] || { echo "no PTDP_VERSION_* in $1" >&2; exit 1; }
  echo "$major.$minor.$patch"
}
version=$(version_of "${headers[0]}")
major=${version%%.*}
soname=$(readelf -d "$lib" | sed -n 's/.*Library soname: \[\(.*\)\].*/\1/p')
if [[ "$soname" != "libptdp.so.$major" ]]; then
  echo "FAIL: $lib has SONAME '$soname' but the header says version $version (libptdp.so.$major)" >&2
  exit 1
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/ptdp-abi.XXXXXX")
keep_work=0
trap '[[ $keep_work == 1 || -n "${ABI_CHECK_KEEP:-}" ]] || rm -rf "$work"' EXIT
cd "$work"  # abi-compliance-checker writes its logs/ into the current directory

# One dump of LIB as HEADERs declare it, reduced to what is the ABI: the functions the headers
# declare (LIB's other exports, if any, are check_exports.sh's business) and no dependency
# symbols (they depend on the BLAS and MPI a build found, not on ptdp).
{
  echo "<version>$version</version>"
  echo "<headers>"; printf '%s\n' "${headers[@]}"; echo "</headers>"
  echo "<libs>$lib</libs>"
  if [[ ${#includes[@]} -gt 0 ]]; then
    echo "<include_paths>"; printf '%s\n' "${includes[@]}"; echo "</include_paths>"
  fi
} > descriptor.xml
if ! abi-compliance-checker -l ptdp -lang C -dump descriptor.xml -dump-path raw.abi.xml -dump-format xml \
      -sort > dump.log 2>&1; then
  keep_work=1
  cat dump.log >&2
  echo "FAIL: abi-compliance-checker could not dump $lib with ${headers[*]} (files in $work)" >&2
  exit 1
fi
awk '
  /^<symbol_info>/ { in_info = 1 }
  /^<\/symbol_info>/ { in_info = 0 }
  in_info && /<short>/ { s = $0; gsub(/.*<short>|<\/short>.*/, "", s); declared[s] = 1 }
  /^<dep_symbols>/ { print; skipping = 1; next }
  /^<\/dep_symbols>/ { skipping = 0 }
  skipping { next }
  /^<symbols>/ { in_symbols = 1 }
  /^<\/symbols>/ { in_symbols = 0 }
  in_symbols && /<symbol>/ {
    s = $0; gsub(/.*<symbol>|@.*|<\/symbol>.*/, "", s)
    if (!(s in declared)) next
  }
  /^<(headers|target_headers|namespaces)>/ { print; in_list = 1; n = 0; next }
  in_list && /^<\// {
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (text[j] < text[i]) {
      t = text[i]; text[i] = text[j]; text[j] = t
    }
    for (i = 1; i <= n; i++) print text[i]
    in_list = 0; print; next
  }
  in_list { text[++n] = $0; next }
  /^<constants>/ { print; in_constants = 1; n = 0; next }
  in_constants && /^    <constant>/ { cblock = $0 "\n"; next }
  in_constants && /^<\/constants>/ {
    # In name order: the tool writes them in hash order, which differs from run to run.
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (key[j] < key[i]) {
      t = key[i]; key[i] = key[j]; key[j] = t; t = text[i]; text[i] = text[j]; text[j] = t
    }
    for (i = 1; i <= n; i++) printf "%s", text[i]
    in_constants = 0; print; next
  }
  in_constants {
    cblock = cblock $0 "\n"
    if (/<name>/) { cname = $0; gsub(/.*<name>|<\/name>.*/, "", cname) }
    if (/^    <\/constant>/) { n++; key[n] = cname; text[n] = cblock }
    next
  }
  /^<symbol_version>/ { in_versions = 1 }
  /^<\/symbol_version>/ { in_versions = 0 }
  in_versions && /^    <symbol>/ { block = $0 "\n"; keep = 0; collecting = 1; next }
  collecting {
    block = block $0 "\n"
    if (/<name>/) { s = $0; gsub(/.*<name>|<\/name>.*/, "", s); keep = (s in declared) }
    if (/^    <\/symbol>/) { if (keep) printf "%s", block; collecting = 0 }
    next
  }
  { print }
' raw.abi.xml > new.abi.xml
functions=$(awk '/^<symbols>/,/^<\/symbols>/' new.abi.xml | grep -c '<symbol>' || true)

record() {
  cp new.abi.xml "$baseline"
  echo "wrote $baseline: the ABI of $soname version $version, $functions functions, from ${headers[*]}"
}
if [[ ! -f "$baseline" ]]; then
  if [[ $update == 1 ]]; then record; exit 0; fi
  echo "FAIL: no baseline $baseline (record one with --update)" >&2
  exit 1
fi
cp "$baseline" old.abi.xml  # abi-compliance-checker tells dumps from descriptors by their name
base_version=$(sed -n 's:^<library_version>\(.*\)</library_version>:\1:p' old.abi.xml)
base_major=${base_version%%.*}

# Baseline headers this build does not install: their functions are not compared.
: > skip-symbols.txt
while read -r h; do
  found=0
  for given in "${headers[@]}"; do [[ "$(basename "$given")" == "$h" ]] && found=1; done
  if [[ $found == 0 ]]; then
    awk -v header="$h" '
      /^<symbol_info>/ { on = 1 } /^<\/symbol_info>/ { on = 0 }
      on && /^    <symbol>/ { name = "" }
      on && /<short>/ { name = $0; gsub(/.*<short>|<\/short>.*/, "", name) }
      on && /<header>/ { x = $0; gsub(/.*<header>|<\/header>.*/, "", x); if (x == header && name != "") print name }
    ' old.abi.xml >> skip-symbols.txt
    echo "note: $h is not among this build's headers; its functions are not compared:" \
      "$(tr '\n' ' ' < skip-symbols.txt)"
  fi
done < <(awk '/^<headers>/,/^<\/headers>/' old.abi.xml | sed -n 's:.*<name>\(.*\)</name>.*:\1:p')
if [[ -s skip-symbols.txt ]]; then
  if [[ $update == 1 ]]; then
    echo "FAIL: not recording a baseline without every header it has; record it from a build with" \
      "MPI, as the packages are built" >&2
    exit 1
  fi
  # Taken out of the baseline itself: -skip-symbols does not cover removed functions.
  awk '
    NR == FNR { skip[$0] = 1; next }
    /^<symbol_info>/ { info = 1 } /^<\/symbol_info>/ { info = 0 }
    /^<symbols>/ { syms = 1 } /^<\/symbols>/ { syms = 0 }
    /^<symbol_version>/ { vers = 1 } /^<\/symbol_version>/ { vers = 0 }
    (info || vers) && /^    <symbol>/ { block = $0 "\n"; drop = 0; collecting = 1; next }
    collecting {
      block = block $0 "\n"
      if (/<short>|<name>/) { x = $0; gsub(/.*<(short|name)>|<\/(short|name)>.*/, "", x); if (x in skip) drop = 1 }
      if (/^    <\/symbol>/) { if (!drop) printf "%s", block; collecting = 0 }
      next
    }
    syms && /<symbol>/ { x = $0; gsub(/.*<symbol>|@.*|<\/symbol>.*/, "", x); if (x in skip) next }
    { print }
  ' skip-symbols.txt old.abi.xml > old-reduced.abi.xml
  mv old-reduced.abi.xml old.abi.xml
fi

set +e
abi-compliance-checker -l ptdp -old old.abi.xml -new new.abi.xml \
  -report-format xml -report-path report.xml > compare.log 2>&1
rc=$?
set -e
grep -E '^(Binary|Source) compatibility|^Total' compare.log || true

if [[ $rc -eq 0 ]]; then
  added=$(awk '/<report kind="source"/ { on = 1 } /<\/report>/ { on = 0 }
               on && /<added_symbols>/, on && /<\/added_symbols>/' report.xml |
           sed -n 's:.*<name>\(.*\)</name>.*:\1:p' | sed 's/@.*//' | sort -u | tr '\n' ' ')
  echo "PASS: $soname $version is compatible with the $base_version baseline ($functions functions)"
  [[ -z "$added" ]] || echo "added since: $added"
  [[ $update == 0 ]] || record
  exit 0
fi
if [[ $rc -ne 1 ]]; then
  keep_work=1
  cat compare.log >&2
  echo "FAIL: abi-compliance-checker failed (exit $rc); files in $work" >&2
  exit 1
fi

# Signatures changed on purpose in a new symbol version: source-changes.txt beside the baseline
# lists them ("FUNCTION OLD_VERSION why"). Such a change passes when it is all that broke and the
# library still exports the function at the version the baseline had, whose old signature the
# programs of older releases call; an entry that no longer matches a problem fails, so that the
# list cannot hide a later change.
changes="$(dirname "$baseline")/source-changes.txt"
problems=$(awk '
  /<problems_with_(symbols|types) severity="(High|Medium)">/ { on = 1; next }
  /<\/problems_with_(symbols|types)>/ { on = 0 }
  on && /<(symbol|type) name=/ { x = $0; sub(/.*name="/, "", x); sub(/".*/, "", x); sub(/@.*/, "", x); print x }
' report.xml | sort -u)
if [[ -f "$changes" && -n "$problems" ]]; then
  listed=$(grep -v '^#' "$changes" | awk 'NF { print $1 }' | sort -u)
  unlisted=$(comm -23 <(echo "$problems") <(echo "$listed"))
  stale=$(comm -13 <(echo "$problems") <(echo "$listed"))
  exported=$(nm -D --defined-only "$lib" | awk '{ print $3 }')
  old_missing=""
  while read -r fn node _; do
    [[ -z "$fn" || "$fn" == \#* ]] && continue
    grep -qx "$fn@$node" <<< "$exported" || old_missing+="$fn@$node "
  done < "$changes"
  if [[ -z "$unlisted" && -z "$stale" && -z "$old_missing" ]]; then
    echo "PASS: $soname $version is binary compatible with the $base_version baseline ($functions functions);" \
      "source changes in new symbol versions (packaging/abi/source-changes.txt), old versions still exported:"
    grep -v '^#' "$changes" | awk 'NF' | sed 's/^/  /'
    [[ $update == 0 ]] || record
    keep_work=0
    exit 0
  fi
  [[ -z "$stale" ]] || echo "source-changes.txt lists changes abi-compliance-checker does not report:" $stale
  [[ -z "$old_missing" ]] || echo "source-changes.txt's old versions that $lib does not export:" $old_missing
fi

# Incompatible: list what broke (each problem once, binary and source reports alike).
keep_work=1
echo "Incompatible changes against the $base_version baseline:"
awk '
  function attr(line, name,   v) {
    if (line !~ (name "=\"")) return ""
    v = line; sub(".*" name "=\"", "", v); sub(/".*/, "", v); return v
  }
  /<removed_symbols>/ { removed = 1 } /<\/removed_symbols>/ { removed = 0 }
  removed && /<name>/ { s = $0; gsub(/.*<name>|<\/name>.*|@.*/, "", s); print "  removed function " s }
  /<type name=/ { t = attr($0, "name") }
  /<symbol name=/ && !/param=/ { t = attr($0, "name"); sub(/@.*/, "", t) }
  /<problem id=/ { p = attr($0, "id") }
  /<change / {
    c = $0; sub(/.*<change [^>]*>/, "", c); sub(/<\/change>.*/, "", c)
    gsub(/@target/, attr($0, "target"), c); gsub(/@old_value/, attr($0, "old_value"), c)
    gsub(/@new_value/, attr($0, "new_value"), c)
    print "  " t ": " p ": " c
  }
' report.xml | grep -v ': Changed_Constant: ' | sort -u
abi-compliance-checker -l ptdp -old old.abi.xml -new new.abi.xml \
  -report-path report.html > /dev/null 2>&1 || true
echo "Reports: $work/report.html, $work/report.xml"
if [[ "$major" != "$base_major" ]]; then
  echo "PASS: the SONAME changed from libptdp.so.$base_major to $soname, which declares these" \
    "incompatible changes; record the new baseline (packaging/abi/README.md)"
  [[ $update == 0 ]] || record
  exit 0
fi
if [[ $update == 1 ]]; then
  echo "FAIL: not recording an incompatible ABI under the same SONAME; bump PTDP_VERSION_MAJOR first" >&2
  exit 1
fi
echo "FAIL: $soname keeps its SONAME, so programs built against $base_version must keep working." \
  "Undo the change, or make it compatible (append fields, add functions), or bump PTDP_VERSION_MAJOR" \
  "(and the SONAME) and record a new baseline (packaging/abi/README.md)." >&2
exit 1
