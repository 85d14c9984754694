#!/usr/bin/env bash
# Network chaos between real hosts: every case of tests/it/chaos.rs, the upstream in a network
# namespace of its own (made by each test, removed after), the link cut or degraded. CI runs
# only the stream partition; this runs the matrix. Needs root and iproute2; the random loss
# case needs nftables (apt-get install nftables), the latency case the kernel's sch_netem (each
# probed, and skipped with a message without it).
#
#   scripts/chaos.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export SWITCHYARD_CHAOS_MATRIX=1
start=$(date +%s)
out=$(cargo test --release --test it chaos:: -- --nocapture --test-threads=1 2>&1) || { echo "$out"; exit 1; }
echo "$out" | grep -E '^test chaos::|SKIPPED' || true
echo "$out" | grep -E '^test result'
echo "chaos matrix: $(( $(date +%s) - start )) s"
