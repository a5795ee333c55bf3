#!/usr/bin/env bash
# The scaling table of the remote scenarios: builds rally-bench (with the grain scenarios) and
# runs `rally-bench scale`, which pins each run with taskset to the first 2, 4, 8, 16, 32, 64
# cores (those this machine has) and prints one table: msgs/s, p50/p99, messages per write and
# writer wake-ups per message (Rally's counters), CPU per message, and futex calls and eventfd
# writes per message where `perf stat` can count them. Rally, Proto.Actor Go (needs `go`) and
# Pekko (needs `java` and `mvn`; left out where they are missing) run the same scenarios.
#
#   bench/scale.sh                      # every core count, every scenario (about 5 min a core count)
#   bench/scale.sh --cores 4,16 --json  # flags go to `rally-bench scale` (see --help)
#
# The model these figures check is docs/write-path-model.md; its predictions for 4, 8 and 16
# cores are written there.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --locked -p rally-bench --features grains
exec "${CARGO_TARGET_DIR:-target}/release/rally-bench" scale "$@"
