#!/usr/bin/env bash
# Usage: check_exports.sh LIB MAJOR HEADER...
# Fails unless LIB's SONAME is libptdp.so.MAJOR and its exported functions are exactly the
# PTDP_API functions the HEADERs declare.
set -euo pipefail
lib=$1 major=$2
shift 2
headers=("$@")

soname=$(readelf -d "$lib" | sed -n 's/.*Library soname: \[\(.*\)\].*/\1/p')
if [[ "$soname" != "libptdp.so.$major" ]]; then
  echo "SONAME is '$soname', expected libptdp.so.$major" >&2
  exit 1
fi

exported=$(nm -D --defined-only "$lib" | awk '$2 ~ /^[TtWiDdBbRrVv]$/ {print $3}' | sed 's/@.*//' | sort -u)
declared=$(cat "${headers[@]}" | grep -E '^PTDP_API '  | grep -oE '[a-z_0-9]+\(' | sed 's/($//' | grep '^ptdp_' | sort -u)

stray=$(comm -23 <(echo "$exported") <(echo "$declared"))
missing=$(comm -13 <(echo "$exported") <(echo "$declared"))
status=0
if [[ -n "$stray" ]]; then echo "exported but not declared in the header:"; echo "$stray"; status=1; fi >&2
if [[ -n "$missing" ]]; then echo "declared but not exported:"; echo "$missing"; status=1; fi >&2
echo "$(echo "$declared" | wc -l) functions declared, SONAME $soname"
exit $status
