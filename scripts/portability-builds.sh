#!/usr/bin/env bash
# Builds the tree for CPUs and compilers other than the default build's, at -Werror, with no native flag and at
# -O2 (what distributions and most consumers ship with; the default build covers -O3), whatever CPU this
# machine has.
#
#   gcc-v2    GCC at x86-64-v2, the portable baseline: every scalar fallback. The library's tests are built
#             and run; the tool and the benches are not (the tool adds no kernel of its own: it calls the
#             library, whose v2 code paths the tests run, and its own code is the default build's).
#   clang-v4  Clang at x86-64-v4 (AVX-512): the tests and the tool, so Clang sees all of our code but the
#             benches. Its tests run where the CPU has AVX-512, all but the peer checks (Python against the
#             tool: the same library code the unit tests run here, checked against the peers by the default
#             build's run).
#   gcc-v4, gcc-v3, clang-v2, clang-v3: on request only. The GCC and Clang strict consumers of the default
#             build's ctest (tests/consumer/strict) compile every algorithm with its ISA-specific kernels at
#             all six compiler and level pairs with -Werror, and run them where the CPU allows, and the
#             default build is GCC at -march=native; a whole-tree build per pair would double CI's time.
#
# Those cuts keep CI within its 40 minutes on 2 cores: the tool alone costs about 400 CPU seconds per build
# and the benches about 300. MOECOMP_PORTABILITY_ALL=1 builds and runs everything in every job.
#
# CUDA is left to the default build. CI runs this after the README's test command.
#
#   scripts/portability-builds.sh [JOB ...]     (default: gcc-v2 clang-v4; MOECOMP_PORTABILITY_ALL_TESTS=1
#                                                 also runs the tests of a gcc-v4 job)
#
# Each job builds into build/portability-<job>. MOECOMP_REQUIRE_PEERS is passed through to the tests.
set -euo pipefail
cd "$(dirname "$0")/.."

jobs=("$@")
[ ${#jobs[@]} -gt 0 ] || jobs=(gcc-v2 clang-v4)

cpu_has() { grep -qw "$1" /proc/cpuinfo 2>/dev/null; }

run_job() {
  local job=$1 compiler level run_tests benches=OFF tool=ON
  case "$job" in
    gcc-v2) compiler=g++; level=x86-64-v2; tool=OFF ;;
    gcc-v3) compiler=g++; level=x86-64-v3 ;;
    gcc-v4) compiler=g++; level=x86-64-v4 ;;
    clang-v2) compiler=clang++; level=x86-64-v2 ;;
    clang-v3) compiler=clang++; level=x86-64-v3 ;;
    clang-v4) compiler=clang++; level=x86-64-v4 ;;
    *) echo "portability-builds: error: unknown job '$job' (expected gcc-v2, gcc-v3, gcc-v4, clang-v2," \
            "clang-v3 or clang-v4)" >&2; return 2 ;;
  esac
  if [ "${MOECOMP_PORTABILITY_ALL:-0}" = 1 ]; then benches=ON; tool=ON; fi
  case "$level" in
    x86-64-v2) run_tests=$(cpu_has sse4_2 && cpu_has popcnt && echo yes || echo no) ;;
    x86-64-v3) run_tests=$(cpu_has avx2 && cpu_has fma && cpu_has bmi2 && echo yes || echo no) ;;
    x86-64-v4) run_tests=$(cpu_has avx512f && cpu_has avx512bw && cpu_has avx512vl && cpu_has avx512dq &&
                           echo yes || echo no) ;;
  esac
  if ! command -v "$compiler" >/dev/null 2>&1; then
    echo "portability-builds: error: job $job needs $compiler; run ./scripts/install-deps.sh" >&2
    return 1
  fi
  local dir="build/portability-$job" start
  mkdir -p build
  start=$(date +%s)
  echo "portability-builds: $job: $compiler -march=$level -O2 -Werror into $dir (tool $tool, benches $benches)"
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE="-O2 -DNDEBUG" \
    -DCMAKE_CXX_COMPILER="$compiler" \
    -DCMAKE_CXX_FLAGS="-march=$level" -DMOECOMP_NATIVE=OFF -DMOECOMP_WERROR=ON -DMOECOMP_ENABLE_CUDA=OFF \
    -DMOECOMP_BUILD_BENCHMARKS="$benches" -DMOECOMP_BUILD_EXAMPLES="$tool" -DMOECOMP_BUILD_TOOLS="$tool" \
    > "$dir.configure.log" 2>&1 || { cat "$dir.configure.log"; return 1; }
  cmake --build "$dir"
  # GCC at x86-64-v4 is compiled only: on a CPU with AVX-512 the default build (GCC, -march=native, a superset
  # of v4) runs the whole suite already, and clang-v4 runs it at exactly v4.
  if [ "$job" = gcc-v4 ] && [ "$run_tests" = yes ] && [ "${MOECOMP_PORTABILITY_ALL_TESTS:-0}" != 1 ]; then
    echo "portability-builds: $job: compiled only (the default build's GCC -march=native run covers it;" \
         "MOECOMP_PORTABILITY_ALL_TESTS=1 runs it here too)"
    run_tests=skip
  fi
  if [ "$run_tests" = yes ]; then
    # The packaging tests install and build consumers, which the default build's run covers already. The
    # peer checks run the tool against Python: the default build runs them (see the header for why not here).
    # Without the tool (gcc-v2) there are no tool tests at all: the reliability suite (signals, partial
    # outputs, resources, messages: nothing that depends on the instruction set) runs in the default build
    # and in clang-v4. The MPI runs (test_compress_mpi, the mpi4py example: 20 s) compare 2 ranks with one
    # process of the same build, which the default build does; CI's 40 minutes leave little for repeating them.
    local excluded="package|peer|mpi"
    [ "${MOECOMP_PORTABILITY_ALL:-0}" = 1 ] && excluded=package
    ctest --test-dir "$dir" -L cpu -LE "$excluded" --output-on-failure -j 2 --no-tests=error
  elif [ "$run_tests" = no ]; then
    echo "portability-builds: $job: compiled only (this CPU lacks $level, so its tests cannot run here)"
  fi
  echo "portability-builds: $job: passed in $(( $(date +%s) - start )) s"
}

for job in "${jobs[@]}"; do
  run_job "$job"
done
