#!/usr/bin/env bash
# Instructions per grain-ping request, per process, counted with valgrind's callgrind: a
# figure that does not move with this machine's load or CPU model as time does. Each
# configuration runs twice (rows of SHORT and LONG seconds, P=32) and the instructions per
# request are the difference between the two runs divided by the difference in requests, so
# start-up and warm-up drop out. The members are killed at the end of a run, so callgrind
# dumps their counts as it goes (--dump-every-bb) and the dumps are summed.
#
#   bench/instructions/run.sh off 0 0.01 1      # untraced, and tracing recording 0%, 1%, 100%
#   SHORT=10 LONG=20 bench/instructions/run.sh off 1
#
# Configurations: `off` (no tracing) or a sampling ratio (tracing on, spans exported to
# `rally-bench otlp-sink` on loopback; the receiver is not counted). Needs valgrind. Prints one
# line a configuration: instructions a request in all, and in the client and each member.
# See docs/benchmarks.md, "Where the grain-ping cost is".
set -euo pipefail
cd "$(dirname "$0")/../.."
[ $# -gt 0 ] || { echo "usage: $0 off|RATIO ..." >&2; exit 2; }
command -v valgrind > /dev/null || { echo "valgrind is needed (Debian: apt-get install valgrind)" >&2; exit 2; }
SHORT=${SHORT:-10}
LONG=${LONG:-20}
cargo build --release --locked -p rally-bench --features grains,otel
bench="$(pwd)/${CARGO_TARGET_DIR:-target}/release/rally-bench"
work=$(mktemp -d)
trap 'exec 8>&- 2> /dev/null || true; rm -rf "$work"' EXIT

# The receiver, for the traced runs: its endpoint is the first line it prints.
mkfifo "$work/sink.in"
"$bench" otlp-sink --listen 127.0.0.1:0 < "$work/sink.in" > "$work/sink.out" 2> /dev/null &
exec 8> "$work/sink.in"
until [ -s "$work/sink.out" ]; do sleep 0.1; done
endpoint=$(head -n 1 "$work/sink.out")

index=0
for config in "$@"; do
  index=$((index + 1))
  env=()
  if [ "$config" != off ]; then
    env=(RALLY_BENCH_OTEL=1 OTEL_EXPORTER_OTLP_ENDPOINT="$endpoint"
         OTEL_TRACES_SAMPLER=parentbased_traceidratio OTEL_TRACES_SAMPLER_ARG="$config")
  fi
  runs=()
  for seconds in "$SHORT" "$LONG"; do
    run="$work/$index-$seconds"
    mkdir -p "$run"
    env "${env[@]}" valgrind --tool=callgrind --trace-children=yes --dump-every-bb=400000 \
      --callgrind-out-file="$run/cg.%p" \
      "$bench" grain-ping --parallelism 32 --seconds "$seconds" --json > "$run/out.json" 2> "$run/err.log"
    runs+=("$run")
  done
  python3 bench/instructions/per_request.py "$config" "${runs[@]}"
done
