#!/usr/bin/env bash
# Builds every libFuzzer target fuzz/*_fuzzer.cpp with clang (-fsanitize=fuzzer,address,undefined) and runs
# each for a bounded time from a seed corpus. Any crash, sanitizer report, leak or timeout fails the run and
# leaves the input that caused it in fuzz/crash-*. CI runs this with 20 seconds per target (.ci/run, to stay within its 40 minutes): six
# targets, about 3 minutes with the builds.
#
#   scripts/run-fuzzers.sh [SECONDS_PER_TARGET]      default 60
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
if ! command -v clang++ >/dev/null 2>&1; then
  echo "run-fuzzers: error: needs clang++ with libFuzzer; run ./scripts/install-deps.sh" >&2
  exit 1
fi
mkdir -p build/fuzz
for source in fuzz/*_fuzzer.cpp; do
  name=$(basename "$source" .cpp)
  target=${name%_fuzzer}
  binary=build/fuzz/$name
  corpus=build/fuzz/corpus-$target
  clang++ -std=c++17 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all -Iinclude -isystem /usr/include/eigen3 \
    "$source" -o "$binary"
  mkdir -p "$corpus"
  if [ -x "fuzz/seeds-$target.py" ] || [ -f "fuzz/seeds-$target.py" ]; then
    /usr/bin/python3 "fuzz/seeds-$target.py" "$corpus"
  fi
  dictionary=()
  [ -f "fuzz/$target.dict" ] && dictionary=(-dict="fuzz/$target.dict")
  echo "run-fuzzers: $name for $seconds s"
  log=build/fuzz/$name.log
  if ! "$binary" -max_total_time="$seconds" -max_len=4096 -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
       -artifact_prefix=fuzz/crash- "${dictionary[@]}" "$corpus" > "$log" 2>&1; then
    tail -n 40 "$log"
    echo "run-fuzzers: $name failed; the input that did it is in fuzz/crash-*" >&2
    exit 1
  fi
  grep -E '^(Done|stat::number_of_executed_units|stat::new_units_added|stat::peak_rss_mb)' "$log"
done
