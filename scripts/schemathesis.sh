#!/usr/bin/env bash
# The admin API against its OpenAPI document with schemathesis, longer than CI's run (which
# generates 25 examples per operation): EXAMPLES per operation, every check, every phase.
#
#   scripts/schemathesis.sh               # EXAMPLES=200
#
# Needs schemathesis==4.32.5 (`.ci/run` installs it in /var/tmp/switchyard-schemathesis-venv);
# PostgreSQL is not used (the store is an SQLite file).
set -euo pipefail
cd "$(dirname "$0")/.."
export SWITCHYARD_SCHEMATHESIS="${SWITCHYARD_SCHEMATHESIS:-/var/tmp/switchyard-schemathesis-venv/bin/st}"
export SWITCHYARD_SCHEMATHESIS_EXAMPLES="${EXAMPLES:-200}"
start=$(date +%s)
cargo test --release --test it schemathesis:: -- --nocapture 2>&1 | grep -E '^schemathesis:|^test |test result|panicked|ST[0-9]'
echo "schemathesis: ${SWITCHYARD_SCHEMATHESIS_EXAMPLES} examples per operation, $(( $(date +%s) - start )) s"
