#!/usr/bin/env bash
# A rolling upgrade from the previous release (tests/it/upgrade.rs): builds the previous
# release's binary, then runs the test with it beside this checkout's binary, on an SQLite store
# and on a PostgreSQL one (127.0.0.1:5432).
#
#   scripts/upgrade.sh                    # the last tag; without tags, the commit before the
#                                         # last store migration was added
#   PREVIOUS=<rev> scripts/upgrade.sh     # any earlier revision
#
# The previous release is built in a worktree with this checkout's target directory (its
# dependencies are mostly the same, so only the crate is rebuilt), and its binary copied out
# before this checkout's is built again.
set -euo pipefail
cd "$(dirname "$0")/.."
last_migration=$(git log -1 --format=%H --diff-filter=A -- migrations/)
PREVIOUS=${PREVIOUS:-$(git describe --tags --abbrev=0 2>/dev/null || echo "$last_migration^")}
if ! git rev-parse -q --verify "$PREVIOUS^{commit}" >/dev/null; then
  echo "skipped: the previous release ($PREVIOUS) is not in this clone's history"
  exit 0
fi
target=${CARGO_TARGET_DIR:-$PWD/target}
out=$(mktemp -d)
wt=$(mktemp -d)
trap 'git worktree remove --force "$wt" >/dev/null 2>&1 || true; rm -rf "$out"' EXIT
git worktree add --detach "$wt" "$PREVIOUS" >/dev/null
echo "previous release: $(git -C "$wt" log -1 --format='%h %ad %s' --date=short | cut -c1-100)"
(cd "$wt" && CARGO_TARGET_DIR=$target cargo build --bin switchyard 2>&1 | tail -1)
cp "$target/debug/switchyard" "$out/switchyard-previous"
SWITCHYARD_PREVIOUS_BIN="$out/switchyard-previous" \
  cargo test --test it upgrade:: -- --nocapture 2>&1 | grep -E '^upgrade|^test |test result|panicked'
