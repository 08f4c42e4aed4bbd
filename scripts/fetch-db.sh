#!/usr/bin/env bash
# Restore the current GPU-run database from git history into db/evo.sqlite (or the path given):
# run databases stay out of the tree (dev/gpu-runs/DATABASES.md lists every one and its commit).
set -euo pipefail
cd "$(dirname "$0")/.."
COMMIT=863fc48
DUMP=dev/gpu-runs/2026-11-29c-h200/twins/evo.sqlite.gz
DEST=${1:-db/evo.sqlite}
if [ -e "$DEST" ]; then echo "fetch-db: $DEST exists; move it away first" >&2; exit 2; fi
git show "$COMMIT:$DUMP" | gunzip > "$DEST"
echo "$DEST: the database of $DUMP at $COMMIT ($(stat -c %s "$DEST") bytes)"
