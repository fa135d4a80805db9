"""Conan 2 recipe of moecomp (header-only).

The package is what `cmake --install` of this repository produces (headers under include/moecomp, the
licence), less the CMake package files under share/cmake: with Conan, CMakeDeps writes the consumer's
moecomp-config.cmake from package_info() below, with the same file name and target names
(moecomp::moecomp, and moecomp::openmp / moecomp::cuda / moecomp::safetensors when the options ask for them).

    conan create .                       # builds the package and runs tests/consumer/cpu against it
    conan create . -o "moecomp/*:cuda=True"

The options change only package_info(), never the files, so every configuration shares one package id.
Conan is not available on moecomp's build machines; what this recipe runs (the CMake install and the
consumer project) is tested there by the ctest packaging tests (label `package`).
"""
import os
import re

from conan import ConanFile
from conan.tools.build import check_min_cppstd
from conan.tools.cmake import CMake, CMakeDeps, CMakeToolchain, cmake_layout
from conan.tools.files import copy, load, rmdir, save

required_conan_version = ">=2.0"

# Written into the package and included by the CMakeDeps-generated config when the option is on: they give
# the component targets the system dependencies that Conan does not package (the CUDA Toolkit, OpenMP).
# Each runs on every find_package(moecomp), hence the check before appending.
_CUDA_MODULE = """\
# moecomp::cuda links the CUDA Toolkit of this machine (Conan option moecomp/*:cuda=True).
find_package(CUDAToolkit REQUIRED)
if(TARGET moecomp::cuda)
  get_property(_moecomp_links TARGET moecomp::cuda PROPERTY INTERFACE_LINK_LIBRARIES)
  if(NOT "CUDA::cudart" IN_LIST _moecomp_links)
    set_property(TARGET moecomp::cuda APPEND PROPERTY INTERFACE_LINK_LIBRARIES CUDA::cudart CUDA::cublas)
  endif()
  unset(_moecomp_links)
endif()
"""
_OPENMP_MODULE = """\
# moecomp::openmp links the compiler's OpenMP (Conan option moecomp/*:openmp=True).
find_package(OpenMP REQUIRED COMPONENTS CXX)
if(TARGET moecomp::openmp)
  get_property(_moecomp_links TARGET moecomp::openmp PROPERTY INTERFACE_LINK_LIBRARIES)
  if(NOT "OpenMP::OpenMP_CXX" IN_LIST _moecomp_links)
    set_property(TARGET moecomp::openmp APPEND PROPERTY INTERFACE_LINK_LIBRARIES OpenMP::OpenMP_CXX)
  endif()
  unset(_moecomp_links)
endif()
"""
_MODULES_DIR = os.path.join("share", "conan", "moecomp")


class MoecompConan(ConanFile):
    name = "moecomp"
    description = "Header-only algorithms for Mixture-of-Experts compression, with CUDA specialisations"
    license = "MIT"
    homepage = "https://github.com/moecomp/moecomp"
    url = "https://github.com/moecomp/moecomp"
    topics = ("mixture-of-experts", "model-compression", "clustering", "optimal-transport", "cuda",
              "header-only")
    package_type = "header-library"
    settings = "os", "arch", "compiler", "build_type"
    options = {"cuda": [True, False], "openmp": [True, False], "safetensors": [True, False]}
    default_options = {"cuda": False, "openmp": False, "safetensors": False}
    exports_sources = "CMakeLists.txt", "LICENSE", "cmake/*", "include/*", "layouts/*"
    no_copy_source = True
    test_package_folder = "tests/consumer/cpu"

    def set_version(self):
        # One source of truth: project(moecomp VERSION x.y.z) in CMakeLists.txt.
        cmakelists = load(self, os.path.join(self.recipe_folder, "CMakeLists.txt"))
        match = re.search(r"project\(\s*moecomp\s+VERSION\s+([0-9]+\.[0-9]+\.[0-9]+)", cmakelists)
        if not match:
            raise ValueError("conanfile.py: no `project(moecomp VERSION x.y.z)` in CMakeLists.txt")
        self.version = self.version or match.group(1)

    def layout(self):
        cmake_layout(self)

    def requirements(self):
        # Public headers include Eigen, so consumers need its headers too.
        self.requires("eigen/3.4.0", transitive_headers=True)
        if self.options.safetensors:
            # <moecomp/io/safetensors.hpp> includes <nlohmann/json.hpp>.
            self.requires("nlohmann_json/3.11.3", transitive_headers=True)

    def package_id(self):
        self.info.clear()

    def validate(self):
        if self.settings.compiler.get_safe("cppstd"):
            check_min_cppstd(self, 17)

    def generate(self):
        toolchain = CMakeToolchain(self)
        # Only the install rules: no tests, tools, benchmarks or CUDA language in the packaging build.
        toolchain.cache_variables.update({
            "MOECOMP_INSTALL": True,
            "MOECOMP_BUILD_TESTS": False,
            "MOECOMP_BUILD_EXAMPLES": False,
            "MOECOMP_BUILD_TOOLS": False,
            "MOECOMP_BUILD_BENCHMARKS": False,
            "MOECOMP_ENABLE_CUDA": False,
        })
        toolchain.generate()
        CMakeDeps(self).generate()

    def build(self):
        # Header-only: configuring generates the install rules; there is nothing to compile.
        cmake = CMake(self)
        cmake.configure()

    def package(self):
        cmake = CMake(self)
        cmake.install()
        copy(self, "LICENSE", src=self.source_folder, dst=os.path.join(self.package_folder, "licenses"))
        # CMakeDeps generates the consumer's config files from package_info(); the package's own ones would
        # only be a second, unused copy.
        rmdir(self, os.path.join(self.package_folder, "share", "cmake"))
        save(self, os.path.join(self.package_folder, _MODULES_DIR, "moecomp-cuda.cmake"), _CUDA_MODULE)
        save(self, os.path.join(self.package_folder, _MODULES_DIR, "moecomp-openmp.cmake"), _OPENMP_MODULE)

    def package_info(self):
        self.cpp_info.set_property("cmake_file_name", "moecomp")
        # The package-wide target aggregates every component; it gets a name of its own so that
        # moecomp::moecomp stays the host-only component, as in the CMake install.
        self.cpp_info.set_property("cmake_target_name", "moecomp::all")
        self.cpp_info.bindirs = []
        self.cpp_info.libdirs = []

        core = self.cpp_info.components["core"]
        core.set_property("cmake_target_name", "moecomp::moecomp")
        core.requires = ["eigen::eigen"]
        core.bindirs = []
        core.libdirs = []

        build_modules = []
        if self.options.openmp:
            openmp = self.cpp_info.components["openmp"]
            openmp.set_property("cmake_target_name", "moecomp::openmp")
            openmp.requires = ["core"]
            openmp.includedirs = []
            openmp.bindirs = []
            openmp.libdirs = []
            build_modules.append(os.path.join(_MODULES_DIR, "moecomp-openmp.cmake"))
        if self.options.safetensors:
            safetensors = self.cpp_info.components["safetensors"]
            safetensors.set_property("cmake_target_name", "moecomp::safetensors")
            safetensors.requires = ["core", "nlohmann_json::nlohmann_json"]
            safetensors.includedirs = []
            safetensors.bindirs = []
            safetensors.libdirs = []
        if self.options.cuda:
            cuda = self.cpp_info.components["cuda"]
            cuda.set_property("cmake_target_name", "moecomp::cuda")
            cuda.requires = ["core"]
            cuda.includedirs = []
            cuda.bindirs = []
            cuda.libdirs = []
            build_modules.append(os.path.join(_MODULES_DIR, "moecomp-cuda.cmake"))
        # CMakeDeps includes these after the targets exist (build modules are a package-level property).
        if build_modules:
            self.cpp_info.set_property("cmake_build_modules", build_modules)
