# vcpkg overlay port of moecomp (header-only):
#   vcpkg install moecomp --overlay-ports=<moecomp checkout>/ports            (classic mode)
#   "overlay-ports": ["<moecomp checkout>/ports"] in vcpkg-configuration.json   (manifest mode)
# It builds the checkout it lives in. A registry port would fetch a release instead:
#   vcpkg_from_github(OUT_SOURCE_PATH SOURCE_PATH REPO moecomp/moecomp REF "v${VERSION}" SHA512 <sha512 of the archive>
#                     HEAD_REF main)
# The features only add dependencies (the headers and CMake package are the same for all of them): the
# cuda feature brings the CUDA Toolkit for find_package(moecomp CONFIG REQUIRED COMPONENTS cuda).
set(VCPKG_BUILD_TYPE release)  # header-only: one configuration is enough

get_filename_component(SOURCE_PATH "${CMAKE_CURRENT_LIST_DIR}/../.." ABSOLUTE)
if(NOT EXISTS "${SOURCE_PATH}/include/moecomp/moecomp.hpp")
  message(FATAL_ERROR "moecomp port: expected the moecomp sources at ${SOURCE_PATH}")
endif()

vcpkg_cmake_configure(
  SOURCE_PATH "${SOURCE_PATH}"
  OPTIONS
    -DMOECOMP_INSTALL=ON
    -DMOECOMP_BUILD_TESTS=OFF
    -DMOECOMP_BUILD_EXAMPLES=OFF
    -DMOECOMP_BUILD_TOOLS=OFF
    -DMOECOMP_BUILD_BENCHMARKS=OFF
    -DMOECOMP_ENABLE_CUDA=OFF
    -DMOECOMP_INSTALL_CMAKEDIR=share/moecomp
)
vcpkg_cmake_install()
# The package files are installed straight into share/moecomp (vcpkg's place for them); the fixup
# still checks them and rewrites any absolute path.
vcpkg_cmake_config_fixup(CONFIG_PATH share/moecomp)

file(REMOVE_RECURSE "${CURRENT_PACKAGES_DIR}/debug" "${CURRENT_PACKAGES_DIR}/lib" "${CURRENT_PACKAGES_DIR}/share/doc")
file(INSTALL "${CMAKE_CURRENT_LIST_DIR}/usage" DESTINATION "${CURRENT_PACKAGES_DIR}/share/${PORT}")
vcpkg_install_copyright(FILE_LIST "${SOURCE_PATH}/LICENSE")
