#!/usr/bin/env bash
# The device checks in one call: the CUDA tests and benchmarks, built here (nvcc needs no GPU), run on a
# machine with one. Building there would spend the lease on compiling.
#
#   scripts/device-check.sh stage [BUILD_DIR]   # here: copies the built CUDA tests and benchmarks, and
#                                               # libbenchmark, into .device-run/ (ignored by git)
#   scripts/device-check.sh run [SECONDS]       # there, from the checkout root, with .device-run carried:
#                                               # tests, then benchmarks and their PyTorch peer
#                                               # (bench/peers/cuda_vs_torch.py), then compute-sanitizer
#                                               # memcheck on the tests while SECONDS (default 420) allow;
#                                               # every log in $OUT/logs.tar.gz, the summary printed last
#   scripts/device-check.sh profile BENCH FILTER   # there: Nsight Compute's time per kernel of one case
#   scripts/device-check.sh exec COMMAND...        # there: a command with the CUDA libraries on the path
#   Narrower runs: BENCHES="bench_cka_cuda ..." (default all; "none": none), MEMCHECK="test_x_cuda ..."
#   (default all), RACECHECK="test_x_cuda ..." (default none).
#
# The binaries link libcudart.so.13 and libcublas.so.13 dynamically; `run` looks for them in the CUDA
# toolkit and in the nvidia-* Python wheels there.
set -u
dir=.device-run
find_libraries() {
  libs=$(pwd)/$dir
  for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/local/cuda/lib; do
    [ -e "$d/libcublas.so.13" ] && libs=$libs:$d
  done
  py=$(python3 -c 'import nvidia, os; print(os.path.dirname(nvidia.__path__[0]))' 2>/dev/null)
  if [ -n "$py" ]; then
    for f in "$py"/nvidia/*/lib/libcublas.so.13 "$py"/nvidia/*/lib/libcudart.so.13; do
      [ -e "$f" ] && libs=$libs:$(dirname "$f")
    done
  fi
  export LD_LIBRARY_PATH=$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
}

case "${1:-}" in
stage)
  build=${2:-build/default}
  grep -qx "/$dir/" .git/info/exclude 2>/dev/null || echo "/$dir/" >> .git/info/exclude
  rm -rf "$dir"; mkdir -p "$dir"
  cp "$build"/tests/cuda/test_*_cuda "$build"/bench/bench_*_cuda "$dir"/ || exit 1
  lib=$(ldd "$dir"/bench_ot_cuda | awk '/libbenchmark/ {print $3}')
  [ -n "$lib" ] && cp -L "$lib" "$dir"/
  du -sh "$dir"
  ;;
run)
  budget=${2:-420}
  start=$SECONDS
  out=${OUT:-/tmp/device-check}; mkdir -p "$out"
  find_libraries
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv | tee "$out/gpu.txt"
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  summary=$out/summary.txt; : > "$summary"
  # The two ceilings for the floors in bench/RESULTS.md, through PyTorch where it is installed.
  timeout 60 python3 - <<'PY' 2>&1 | tee -a "$summary"
import torch
e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
def timed(f, n=20):
    f(); torch.cuda.synchronize(); e0.record()
    for _ in range(n): f()
    e1.record(); torch.cuda.synchronize(); return e0.elapsed_time(e1) / n / 1e3
a = torch.rand(1 << 28, device="cuda"); b = torch.empty_like(a)
t = timed(lambda: b.copy_(a)); print(f"ceiling copy {2 * a.numel() * 4 / t / 1e9:.0f} GB/s (read + write)")
for dt, name in ((torch.float32, "sgemm"), (torch.bfloat16, "bf16 gemm")):
    torch.backends.cuda.matmul.allow_tf32 = False
    x = torch.rand(8192, 8192, device="cuda", dtype=dt); y = torch.rand(8192, 8192, device="cuda", dtype=dt)
    t = timed(lambda: x @ y, 5); print(f"ceiling {name} {2 * 8192**3 / t / 1e12:.1f} TFLOP/s")
PY
  for t in "$dir"/test_*_cuda; do
    n=$(basename "$t")
    s=$SECONDS
    timeout 150 "$t" > "$out/$n.log" 2>&1; rc=$?
    echo "$n rc=$rc $((SECONDS - s))s $(grep -E '^\[doctest\] (test cases|assertions)' "$out/$n.log" | tr -s ' ' | tr '\n' ' ')" | tee -a "$summary"
  done
  for b in "$dir"/bench_*_cuda; do
    n=$(basename "$b")
    case " ${BENCHES:-$n} " in *" $n "*) ;; *) continue ;; esac
    s=$SECONDS
    timeout 150 "$b" --benchmark_min_time=0.2 --benchmark_out="$out/$n.json" --benchmark_out_format=json \
      > "$out/$n.log" 2>&1; rc=$?
    echo "$n rc=$rc $((SECONDS - s))s" | tee -a "$summary"
  done
  if ls "$out"/bench_*_cuda.json > /dev/null 2>&1; then
    timeout 120 python3 bench/peers/cuda_vs_torch.py "$out" 2>&1 | tee -a "$summary"
  fi
  if command -v compute-sanitizer > /dev/null; then
    for t in "$dir"/test_*_cuda; do
      n=$(basename "$t")
      case " ${MEMCHECK:-$n} " in *" $n "*) ;; *) continue ;; esac
      [ $((SECONDS - start)) -lt "$budget" ] || { echo "memcheck: time is up before $n" | tee -a "$summary"; break; }
      timeout 120 compute-sanitizer --tool memcheck --leak-check full --error-exitcode 9 "$t" > "$out/memcheck.log.tmp" 2>&1; rc=$?
      echo "== $n rc=$rc" >> "$out/memcheck.log"; grep -E "ERROR SUMMARY|=========|\[doctest\] (test cases|Status)" "$out/memcheck.log.tmp" | head -40 >> "$out/memcheck.log"
      echo "memcheck $n rc=$rc $(grep -m1 'ERROR SUMMARY' "$out/memcheck.log.tmp")" | tee -a "$summary"
      grep -q "ERROR SUMMARY: 0 errors" "$out/memcheck.log.tmp" || grep -E "^========= [A-Z]|^=========     at" "$out/memcheck.log.tmp" | head -12
    done
    for n in ${RACECHECK:-}; do
      [ $((SECONDS - start)) -lt "$budget" ] || { echo "racecheck: time is up before $n" | tee -a "$summary"; break; }
      timeout 150 compute-sanitizer --tool racecheck --error-exitcode 9 "$dir/$n" > "$out/racecheck-$n.log" 2>&1; rc=$?
      echo "racecheck $n rc=$rc $(grep -m1 'ERROR SUMMARY' "$out/racecheck-$n.log")" | tee -a "$summary"
    done
    rm -f "$out/memcheck.log.tmp"
  fi
  echo "---- logs of failing tests (tail)"
  for f in "$out"/test_*_cuda.log; do
    grep -q "Status: SUCCESS" "$f" || { echo "== $(basename "$f")"; grep -E "ERROR|CHECK|REQUIRE|error|values:|TEST CASE|SUBCASE|exception" "$f" | head -30; }
  done
  echo "---- benchmarks"
  cat "$out"/bench_*_cuda.log | grep -E "manual_time|Run on|CPU Caches" | head -40
  (cd "$out" && tar czf logs.tar.gz --exclude=logs.tar.gz ./*.log ./*.txt ./*.json 2>/dev/null &&
     find . -maxdepth 1 -type f ! -name logs.tar.gz ! -name summary.txt -delete)
  echo "---- summary"; cat "$summary"
  ;;
exec)
  # Any command with the libraries found, e.g. an older build of a benchmark to compare with.
  find_libraries; shift; "$@"
  ;;
profile)
  # Per-kernel device time of one benchmark case under Nsight Compute, summed by kernel name.
  find_libraries
  out=${OUT:-/tmp/device-check}; mkdir -p "$out"
  timeout "${PROFILE_SECONDS:-90}" ncu --metrics gpu__time_duration.sum --csv --print-units base "$dir/$2" --benchmark_filter="$3" \
    --benchmark_min_time=0.000001 > "$out/ncu-$2.csv" 2> "$out/ncu-$2.err"
  echo "ncu rc=$? $2 $3"
  python3 - "$out/ncu-$2.csv" <<'PY'
import csv, collections, sys
rows = [r for r in csv.reader(l for l in open(sys.argv[1]) if l.startswith('"'))]
head, body = rows[0], rows[1:]
name, value = head.index("Kernel Name"), head.index("Metric Value")
total, count = collections.Counter(), collections.Counter()
for r in body:
    total[r[name][:90]] += float(r[value].replace(",", "")) / 1e3; count[r[name][:90]] += 1
print(f"{sum(total.values()) / 1e3:.3f} ms in {sum(count.values())} kernels")
for k, v in total.most_common(12): print(f"{v / 1e3:9.3f} ms {count[k]:6d}x  {k}")
PY
  ;;
*) echo "usage: $0 stage [BUILD_DIR] | run [SECONDS] | profile BENCH FILTER | exec COMMAND..." >&2; exit 2 ;;
esac
