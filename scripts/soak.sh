#!/usr/bin/env bash
# The soak (tests/it/soak.rs) at full size: REQUESTS requests (100,000 by default) through two
# replicas sharing a redis-server of the test's own (on a free port) and a fresh PostgreSQL
# database on the local server (127.0.0.1:5432), with 20 % of the primary's answers faulted
# (before the commit point, and after it: streams cut, stalled, malformed), one replica killed
# with SIGKILL and restarted, Redis restarted and the config reloaded twice.
# Prints the summary line (requests, faults injected, failures, time, memory). CI runs 5,000.
#
#   scripts/soak.sh                       # REQUESTS=100000
set -euo pipefail
cd "$(dirname "$0")/.."
export SWITCHYARD_SOAK_REQUESTS="${REQUESTS:-100000}"
cargo test --release --test it soak:: -- --nocapture 2>&1 | grep -E '^soak:|^test |test result|panicked'
