#!/usr/bin/env bash
# Coverage-guided fuzzing of the gateway's parsers with cargo fuzz (libFuzzer, AddressSanitizer).
# The targets call `switchyard::fuzz` (src/fuzz/), the same functions `cargo test` replays the
# committed corpora through (tests/it/fuzz_corpus.rs).
#
#   scripts/fuzz.sh                       # every target to its plateau, in rounds of 60 s
#   SECONDS_EACH=120 ROUNDS=20 scripts/fuzz.sh stream_openai config
#   PLATEAU=0 scripts/fuzz.sh             # one round each, plateau or not
#   MERGE=1 scripts/fuzz.sh               # then minimise what was found into fuzz/corpus/
#   BUILD=0 scripts/fuzz.sh               # the targets as last built
#
# A target runs in rounds of SECONDS_EACH seconds, each resuming from the corpus so far, until a
# round adds at most PLATEAU_PCT percent (1, a whole number) to its coverage edges (its
# plateau; 0 waits for a round that adds none) or ROUNDS rounds (10) have run. The table says per
# target: executions, coverage edges (libFuzzer's `cov`) after each round, the inputs kept
# (before minimising) and the result.
# New inputs go to a scratch corpus; the committed one is read, and rewritten only with
# MERGE=1, minimised (libFuzzer's -merge=1, what `cargo fuzz cmin` runs) over both. A failing
# input is saved in fuzz/artifacts/<target>/: copy it to fuzz/regressions/<target>/ once fixed,
# so `cargo test` keeps it fixed. Needs cargo-fuzz (`cargo install cargo-fuzz`);
# RUSTC_BOOTSTRAP=1 lets the stable toolchain take the sanitizer flags.
set -uo pipefail
cd "$(dirname "$0")/.."

SECONDS_EACH=${SECONDS_EACH:-60}
ROUNDS=${ROUNDS:-10}
PLATEAU=${PLATEAU:-1}
PLATEAU_PCT=${PLATEAU_PCT:-1}
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
[ "$PLATEAU" = 1 ] || ROUNDS=1
printf '%-26s | %12s | %-26s | %7s | %s\n' target runs "edges after each round" corpus result
failed=0
for t in "${targets[@]}"; do
  mkdir -p "$scratch/$t" "fuzz/corpus/$t" "fuzz/artifacts/$t"
  runs=0 edges=0 round=0 result=ok trail=""
  while [ "$round" -lt "$ROUNDS" ]; do
    round=$((round + 1))
    log="$scratch/$t.$round.log"
    "$bin_dir/$t" "$scratch/$t" "fuzz/corpus/$t" -artifact_prefix="fuzz/artifacts/$t/" \
      -max_total_time="$SECONDS_EACH" -max_len=16384 -timeout=10 -rss_limit_mb=2048 \
      -print_final_stats=1 >"$log" 2>&1
    rc=$?
    runs=$((runs + $(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | awk '{s+=$2} END {print s+0}')))
    now=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | awk '{print $2+0}')
    if [ $rc -ne 0 ]; then
      result="FAILED (see fuzz/artifacts/$t, log fuzz/artifacts/$t.log)"; failed=1
      cp "$log" "fuzz/artifacts/$t.log" 2>/dev/null
      break
    fi
    trail="$trail${trail:+ }${now:-0}"
    # A round that grew the edges by less than PLATEAU_PCT percent: the plateau.
    if [ "$round" -gt 1 ] && [ $(( (${now:-0} - edges) * 100 )) -le $(( edges * PLATEAU_PCT )) ]; then
      trail="$trail (plateau)"; break
    fi
    edges=${now:-0}
  done
  corpus=$(find "$scratch/$t" "fuzz/corpus/$t" -type f | wc -l)
  printf '%-26s | %12s | %-26s | %7s | %s\n' "$t" "$runs" "$trail" "$corpus" "$result"
  if [ "$MERGE" = 1 ] && [ "$result" = ok ]; then
    mkdir -p "$scratch/merged-$t"
    "$bin_dir/$t" -merge=1 "$scratch/merged-$t" "fuzz/corpus/$t" "$scratch/$t" >/dev/null 2>&1 \
      && rm -f "fuzz/corpus/$t"/* && cp "$scratch/merged-$t"/* "fuzz/corpus/$t/"
  fi
done
exit $failed
