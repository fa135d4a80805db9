# Install rules and the CMake package of moecomp; included by the top-level CMakeLists.txt.
#
# What gets installed (header-only, so the same files on every platform):
#   include/moecomp/**.hpp, **.cuh                the headers
#   share/moecomp/layouts/*.json                  the checkpoint layouts (<moecomp/model/layout.hpp>)
#   share/cmake/moecomp/moecompConfig.cmake       find_package(moecomp CONFIG [COMPONENTS cuda openmp])
#   share/cmake/moecomp/moecompConfigVersion.cmake
#   share/cmake/moecomp/moecompTargets.cmake      moecomp::moecomp (Eigen3::Eigen)
#   share/cmake/moecomp/moecompOpenMPTargets.cmake  moecomp::openmp (OpenMP::OpenMP_CXX), loaded on request
#   share/cmake/moecomp/moecompCudaTargets.cmake    moecomp::cuda (CUDA::cudart, CUDA::cublas), loaded on request
#   share/cmake/moecomp/moecompSafetensorsTargets.cmake  moecomp::safetensors (nlohmann_json), loaded on request
#   share/doc/moecomp/LICENSE
#
# The optional targets live in export sets of their own so that the base package never names an OpenMP,
# CUDA or nlohmann-json target: a consumer that asks for no component never looks for any of them (see
# moecompConfig.cmake.in).

include(CMakePackageConfigHelpers)

# Default ON only for the top-level project: a parent that uses add_subdirectory / FetchContent gets no
# install rules of ours unless it asks (it must, if it exports targets that link moecomp::moecomp).
option(MOECOMP_INSTALL "Generate moecomp's install rules (headers and CMake package files)" ${PROJECT_IS_TOP_LEVEL})
set(MOECOMP_INSTALL_CMAKEDIR "${CMAKE_INSTALL_DATADIR}/cmake/moecomp"
    CACHE STRING "Where moecompConfig.cmake is installed, relative to the prefix")
mark_as_advanced(MOECOMP_INSTALL_CMAKEDIR)

if(NOT MOECOMP_INSTALL)
  return()
endif()

set(_moecomp_component moecomp_development)

install(DIRECTORY "${PROJECT_SOURCE_DIR}/include/moecomp" DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}"
        COMPONENT ${_moecomp_component} FILES_MATCHING PATTERN "*.hpp" PATTERN "*.cuh")
# The checkpoint layouts (data read by <moecomp/model/layout.hpp> and `moecomp compress`).
install(DIRECTORY "${PROJECT_SOURCE_DIR}/layouts/" DESTINATION "${CMAKE_INSTALL_DATADIR}/moecomp/layouts"
        COMPONENT ${_moecomp_component} FILES_MATCHING PATTERN "*.json")
if(EXISTS "${PROJECT_SOURCE_DIR}/LICENSE")
  install(FILES "${PROJECT_SOURCE_DIR}/LICENSE" DESTINATION "${CMAKE_INSTALL_DOCDIR}" COMPONENT ${_moecomp_component})
endif()

install(TARGETS moecomp EXPORT moecompTargets COMPONENT ${_moecomp_component})
install(TARGETS moecomp_openmp EXPORT moecompOpenMPTargets COMPONENT ${_moecomp_component})
install(TARGETS moecomp_cuda EXPORT moecompCudaTargets COMPONENT ${_moecomp_component})
install(TARGETS moecomp_safetensors EXPORT moecompSafetensorsTargets COMPONENT ${_moecomp_component})
foreach(_moecomp_export IN ITEMS moecompTargets moecompOpenMPTargets moecompCudaTargets moecompSafetensorsTargets)
  install(EXPORT ${_moecomp_export} NAMESPACE moecomp:: DESTINATION "${MOECOMP_INSTALL_CMAKEDIR}"
          FILE ${_moecomp_export}.cmake COMPONENT ${_moecomp_component})
endforeach()

# The exported optional targets must link their dependency whether or not this build found it (a packager
# without a CUDA toolkit still ships a working moecomp::cuda), and exactly once (the development section of
# CMakeLists.txt links the CUDA libraries a second time when it enables CUDA). Links missing from the build
# tree are added for the install interface only; this runs after the whole top-level CMakeLists.txt.
function(_moecomp_complete_installed_links target)
  get_target_property(links ${target} INTERFACE_LINK_LIBRARIES)
  if(NOT links)
    set(links "")
  endif()
  list(REMOVE_DUPLICATES links)
  foreach(dependency IN LISTS ARGN)
    if(NOT dependency IN_LIST links)
      list(APPEND links "$<INSTALL_INTERFACE:${dependency}>")
    endif()
  endforeach()
  set_property(TARGET ${target} PROPERTY INTERFACE_LINK_LIBRARIES "${links}")
endfunction()
cmake_language(DEFER DIRECTORY "${PROJECT_SOURCE_DIR}"
               CALL _moecomp_complete_installed_links moecomp_openmp OpenMP::OpenMP_CXX)
cmake_language(DEFER DIRECTORY "${PROJECT_SOURCE_DIR}"
               CALL _moecomp_complete_installed_links moecomp_cuda CUDA::cudart CUDA::cublas)
cmake_language(DEFER DIRECTORY "${PROJECT_SOURCE_DIR}"
               CALL _moecomp_complete_installed_links moecomp_safetensors nlohmann_json::nlohmann_json)

# 0.x: every minor release may change the API, so only the same major.minor (with a patch >= the one
# asked for) is compatible. From 1.0 on this becomes SameMajorVersion.
if(PROJECT_VERSION_MAJOR EQUAL 0)
  set(_moecomp_compatibility SameMinorVersion)
else()
  set(_moecomp_compatibility SameMajorVersion)
endif()
write_basic_package_version_file("${PROJECT_BINARY_DIR}/moecompConfigVersion.cmake" VERSION ${PROJECT_VERSION}
                                 COMPATIBILITY ${_moecomp_compatibility} ARCH_INDEPENDENT)
configure_package_config_file("${PROJECT_SOURCE_DIR}/cmake/moecompConfig.cmake.in"
                              "${PROJECT_BINARY_DIR}/moecompConfig.cmake"
                              INSTALL_DESTINATION "${MOECOMP_INSTALL_CMAKEDIR}")
install(FILES "${PROJECT_BINARY_DIR}/moecompConfig.cmake" "${PROJECT_BINARY_DIR}/moecompConfigVersion.cmake"
        DESTINATION "${MOECOMP_INSTALL_CMAKEDIR}" COMPONENT ${_moecomp_component})

unset(_moecomp_component)
unset(_moecomp_export)
unset(_moecomp_compatibility)
