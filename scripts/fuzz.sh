#!/usr/bin/env bash
# Coverage-guided fuzzing of the gateway's parsers with cargo fuzz (libFuzzer, AddressSanitizer),
# each target for SECONDS seconds. The targets call `switchyard::fuzz` (src/fuzz.rs), the same
# functions `cargo test` replays the committed corpora through (tests/it/fuzz_corpus.rs).
#
#   scripts/fuzz.sh                       # every target, 60 s each
#   SECONDS_EACH=600 scripts/fuzz.sh stream_openai config
#   MERGE=1 scripts/fuzz.sh               # then fold new coverage into fuzz/corpus/ (minimised)
#   BUILD=0 scripts/fuzz.sh               # the targets as last built
#
# New inputs go to a scratch corpus; the committed one is read, and written only with MERGE=1.
# A failing input is saved in fuzz/artifacts/<target>/: copy it to fuzz/regressions/<target>/
# once fixed, so `cargo test` keeps it fixed. Needs cargo-fuzz (`cargo install cargo-fuzz`);
# RUSTC_BOOTSTRAP=1 lets the stable toolchain take the sanitizer flags.
set -uo pipefail
cd "$(dirname "$0")/.."

SECONDS_EACH=${SECONDS_EACH:-60}
MERGE=${MERGE:-0}
export RUSTC_BOOTSTRAP=1
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  mapfile -t targets < <(ls fuzz/fuzz_targets | sed 's/\.rs$//')
fi
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

# BUILD=0: run the targets as last built (a sanitizer build of the crate takes ~20 min on 2 cores).
if [ "${BUILD:-1}" = 1 ]; then cargo fuzz build -O >/dev/null || exit 1; fi
bin_dir=fuzz/target/$(rustc -vV | sed -n 's/^host: //p')/release
printf '%-20s | %8s | %10s | %8s | %s\n' target seconds runs corpus result
failed=0
for t in "${targets[@]}"; do
  mkdir -p "$scratch/$t" "fuzz/corpus/$t" "fuzz/artifacts/$t"
  log="$scratch/$t.log"
  "$bin_dir/$t" "$scratch/$t" "fuzz/corpus/$t" -artifact_prefix="fuzz/artifacts/$t/" \
    -max_total_time="$SECONDS_EACH" -max_len=16384 -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 >"$log" 2>&1
  rc=$?
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | awk '{s+=$2} END {print s+0}')
  corpus=$(ls "$scratch/$t" | wc -l)
  if [ $rc -eq 0 ]; then result=ok; else result="FAILED (see fuzz/artifacts/$t, log $log)"; failed=1; cp "$log" "fuzz/artifacts/$t.log" 2>/dev/null; fi
  printf '%-20s | %8s | %10s | %8s | %s\n' "$t" "$SECONDS_EACH" "$runs" "$corpus" "$result"
  if [ "$MERGE" = 1 ] && [ $rc -eq 0 ]; then
    mkdir -p "$scratch/merged-$t"
    "$bin_dir/$t" -merge=1 "$scratch/merged-$t" "fuzz/corpus/$t" "$scratch/$t" >/dev/null 2>&1 \
      && rm -f "fuzz/corpus/$t"/* && cp "$scratch/merged-$t"/* "fuzz/corpus/$t/"
  fi
done
exit $failed
