#!/usr/bin/env bash
# Usage: vendor-release.sh NAME COMMIT
#
# Copies what a program built against one published ptdp release saw into
# packaging/abi/releases/NAME/: the public headers (include/ptdp/), the linker version script
# (ptdp.map: which symbol version each function had, so a stub library built from it binds a
# program to that release's versions), and the C samples that release shipped and that the
# ABI tests run (samples/). COMMIT is the release's last commit (README.md says which). The
# files are copied verbatim, never edited afterwards: they are what a program of that release
# was compiled from.
set -euo pipefail
if [[ $# -ne 2 ]]; then
  echo "usage: $0 NAME COMMIT" >&2
  exit 2
fi
name=$1 commit=$2
root=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
out="$root/packaging/abi/releases/$name"
rm -rf "$out"
mkdir -p "$out/include/ptdp" "$out/samples"
for header in $(git -C "$root" ls-tree --name-only "$commit" capi/include/ptdp/); do
  git -C "$root" show "$commit:$header" > "$out/include/ptdp/$(basename "$header")"
done
git -C "$root" show "$commit:capi/ptdp.map" > "$out/ptdp.map"
for sample in samples/train/ptdp_train.c samples/plan/ptdp_plan.c samples/c/train_gpt.c; do
  git -C "$root" show "$commit:$sample" > "$out/samples/$(basename "$sample")"
done
echo "$(git -C "$root" rev-parse --short "$commit")" > "$out/COMMIT"
echo "vendored $name from $(git -C "$root" log -1 --format='%h %ad' --date=short "$commit") into $out"
