#!/usr/bin/env bash
# fresh-clone.sh DIR copies the repository this script is in into DIR as a
# fresh clone of it holds it, with the working tree's changes: the files
# git tracks or would track, and none it ignores (no node_modules, dist/,
# bin/ or build/). The pages' hidden set-up runs it to install the SDKs
# from a clone as a reader does.
set -euo pipefail
mkdir -p "$1"
dest=$(cd "$1" && pwd)
cd "$(dirname "$0")/../../../.."
git ls-files -z --cached --others --exclude-standard |
	while IFS= read -r -d '' f; do
		if [ -e "$f" ]; then printf '%s\0' "$f"; fi
	done |
	tar --null -T - -cf - | tar -C "$dest" -xf -
