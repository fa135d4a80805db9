"""pip's build of moecomp's Python binding (docs/python.md, "Installing"): the extension `moecomp` compiled from
moecomp_python.cpp against the repository's headers (include/), Eigen, dlpack, nlohmann-json and pybind11 as Debian
installs them (scripts/install-deps.sh), with OpenMP; plus the pure-Python package moecomp_capture.

    pip install --no-build-isolation --no-index ./python        # offline, with the system's setuptools

Flags: -O3 -std=c++17 -fopenmp and the compiler's default target; MOECOMP_NATIVE=1 in the environment adds
-march=native (as the CMake build does by default). compress_checkpoint's default layouts are this source tree's
layouts/ (its path is compiled in, as python/CMakeLists.txt does; pass layouts= when the tree has moved).
"""
import glob
import os
import re

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def version():
    with open(os.path.join(ROOT, "include", "moecomp", "version.hpp"), encoding="utf-8") as f:
        return re.search(r'#define MOECOMP_VERSION_STRING "([^"]+)"', f.read()).group(1)


def pybind11_include():
    """pybind11's headers: python3-pybind11's get_include() when importable, else pybind11-dev's /usr/include."""
    try:
        import pybind11
        return [pybind11.get_include()]
    except ImportError:
        for candidate in ("/usr/include", "/usr/local/include"):
            if os.path.isfile(os.path.join(candidate, "pybind11", "pybind11.h")):
                return [candidate]
    raise RuntimeError("setup.py: pybind11's headers were not found: apt-get install pybind11-dev "
                       "(or pip install pybind11)")


def eigen_include():
    for candidate in ("/usr/include/eigen3", "/usr/local/include/eigen3"):
        if os.path.isfile(os.path.join(candidate, "Eigen", "Core")):
            return [candidate]
    raise RuntimeError("setup.py: Eigen's headers were not found: apt-get install libeigen3-dev")


for header, package in (("dlpack/dlpack.h", "libdlpack-dev"), ("nlohmann/json.hpp", "nlohmann-json3-dev")):
    if not any(os.path.isfile(os.path.join(d, header)) for d in ("/usr/include", "/usr/local/include")):
        raise RuntimeError(f"setup.py: {header} was not found: apt-get install {package}")

flags = ["-std=c++17", "-O3", "-fopenmp", "-fvisibility=hidden", "-DNDEBUG"]
if os.environ.get("MOECOMP_NATIVE") == "1":
    flags.append("-march=native")
# Python's own CFLAGS (Debian's -O2 -g ...) come first; ours override the optimisation level, -g0 drops the
# debug information (a 10x larger module).
flags.append("-g0")

# oneDNN's GEMMs where its headers and library are installed (Debian libdnnl-dev), as the CMake build does
# (docs/building.md, "GEMM providers"); MOECOMP_GEMM=eigen keeps Eigen's.
macros = [("MOECOMP_SOURCE_LAYOUTS_DIR", '"' + os.path.join(ROOT, "layouts") + '"')]
libraries = []
if os.environ.get("MOECOMP_GEMM", "auto") != "eigen" and any(
        os.path.isfile(os.path.join(d, "oneapi", "dnnl", "dnnl.hpp")) for d in ("/usr/include", "/usr/local/include")):
    libraries.append("dnnl")
    flags.append("-DMOECOMP_USE_ONEDNN=1")  # a flag rather than a macro: recorded in the flags stamp below

# Every header the module is compiled from: setuptools rebuilds when one is newer than the module.
headers = sorted(glob.glob(os.path.join(ROOT, "include", "moecomp", "**", "*.hpp"), recursive=True))

extension = Extension(
    "moecomp",
    sources=["moecomp_python.cpp"],
    depends=headers,
    include_dirs=[os.path.join(ROOT, "include")] + eigen_include() + pybind11_include(),
    define_macros=macros,
    libraries=libraries,
    extra_compile_args=flags,
    extra_link_args=["-fopenmp"],
    language="c++",
)

class build_ext_with_flags(build_ext):
    """build_ext that also rebuilds when the flags changed (MOECOMP_NATIVE): setuptools compares only the files'
    times, and would keep a module built for another target."""

    def run(self):
        stamp = os.path.join(self.build_temp, "moecomp-flags.txt")
        text = " ".join(flags) + "\n"
        try:
            with open(stamp, encoding="utf-8") as f:
                self.force = self.force or f.read() != text
        except OSError:
            self.force = True
        super().run()
        os.makedirs(self.build_temp, exist_ok=True)
        with open(stamp, "w", encoding="utf-8") as f:
            f.write(text)


setup(
    name="moecomp",
    version=version(),
    description="moecomp: Mixture-of-Experts compression algorithms (the C++ library's Python binding) and "
                "moecomp_capture (calibration tokens of Hugging Face MoE models)",
    license="MIT",
    python_requires=">=3.8",
    ext_modules=[extension],
    cmdclass={"build_ext": build_ext_with_flags},
    packages=["moecomp_capture"],
    package_dir={"moecomp_capture": "moecomp_capture"},
    zip_safe=False,
)
