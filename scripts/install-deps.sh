#!/usr/bin/env bash
# Installs, from Debian's packages, whatever moecomp's build, tests and peer checks need and the machine lacks.
# Idempotent: installs nothing when everything is present. Uses sudo when not run as root.
set -euo pipefail
packages=(
  cmake ninja-build g++ git                    # build
  clang libomp-dev                             # the Clang builds of CI's portability check
  libeigen3-dev                                # the one dependency of the library itself
  doctest-dev libbenchmark-dev                 # tests, benchmarks
  xtensor-dev libdlpack-dev nlohmann-json3-dev # optional adaptors, exercised by the tests
  python3-numpy python3-scipy python3-sklearn python3-pot python3-fastcluster  # peers (used via /usr/bin/python3)
  python3-faiss                                # the k-means peer of bench/peers/kmeans_vs_sklearn_faiss.py
  python3-matplotlib                           # the papers' plots (bench/papers/*.py)
  python3-torch                                # the routing peer (tests/peers/test_gate_torch.py), pruning, merging
  pybind11-dev                                 # the Python binding (python/)
  python3-pip python3-setuptools python3-wheel # pip install ./python, offline (docs/python.md, "Installing")
  python3-tqdm                                 # the progress bar of docs/python.md's session
  libopenblas0-pthread                         # an optimised BLAS for the peers (numpy/scipy)
  libopenblas-openmp-dev                       # the opt-in CBLAS of the tool and benches (OpenMP build: thread-safe)
  libdnnl-dev                                  # oneDNN: the GEMM provider of the tool, benches and Python module (float32, bfloat16)
  libopenmpi-dev openmpi-bin                   # Open MPI: `mpirun moecomp compress` (issue 37), and its CI check
  python3-mpi4py                               # the Python binding's multi-process example (docs/python.md)
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi
echo "install-deps: installing ${missing[*]}"
if ! command -v apt-get >/dev/null 2>&1; then
  echo "install-deps: error: this script installs Debian packages and this machine has no apt-get;" \
       "install the equivalents of: ${missing[*]}" >&2
  exit 1
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  if ! command -v sudo >/dev/null 2>&1; then
    echo "install-deps: error: installing packages needs root and there is no sudo; as root run:" \
         "apt-get update && apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
  sudo="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
