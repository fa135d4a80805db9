# Builds one consumer project of tests/consumer against moecomp, the way a user would (cmake -P script):
#
#   MODE=install       `cmake --install` the build tree MOECOMP_BINARY_DIR into a fresh prefix, check the
#                      installed files, move the prefix elsewhere (the package must be relocatable), then
#                      configure the consumer with CMAKE_PREFIX_PATH=<that prefix> only.
#   MODE=package       first configure a fresh build of moecomp with PACKAGE_ARGS (the options the Conan
#                      recipe and the vcpkg port pass), then as MODE=install from that build.
#   MODE=subdirectory  configure the consumer with MOECOMP_SOURCE_DIR / FETCHCONTENT_SOURCE_DIR_MOECOMP set.
#
# Then build it and run the executables named in RUN (exit 0 required; 77 = skipped, for a GPU program on a
# machine without a GPU). NO_CUDA=ON runs every step with no nvcc on PATH and no CUDACXX / CUDA_PATH; with
# MODE=install it also puts trap modules first on CMAKE_MODULE_PATH that fail the configure if anything
# calls find_package(CUDAToolkit) or find_package(CUDA), and checks that the consumer's cache records no
# CUDA compiler or toolkit. (With MODE=subdirectory moecomp's own CMakeLists.txt looks for the toolkit,
# quietly, to give moecomp::cuda its links; that is allowed, enabling CUDA is not.)
#
# Variables: MOECOMP_SOURCE_DIR, MOECOMP_BINARY_DIR (MODE=install), CONSUMER (folder name under
# tests/consumer), WORK_DIR (wiped first), GENERATOR, CXX_COMPILER, [CUDA_COMPILER, CUDA_ARCHITECTURES],
# [NO_CUDA], [RUN], [CONSUMER_ARGS], [PACKAGE_ARGS]. RUN, CONSUMER_ARGS and PACKAGE_ARGS are lists
# separated by "|" (a ";" would be split by add_test).
cmake_minimum_required(VERSION 3.21)

foreach(required IN ITEMS MOECOMP_SOURCE_DIR CONSUMER WORK_DIR MODE GENERATOR)
  if(NOT DEFINED ${required} OR "${${required}}" STREQUAL "")
    message(FATAL_ERROR "run_consumer.cmake: ${required} must be set")
  endif()
endforeach()
set(consumer_source "${MOECOMP_SOURCE_DIR}/tests/consumer/${CONSUMER}")
if(NOT EXISTS "${consumer_source}/CMakeLists.txt")
  message(FATAL_ERROR "run_consumer.cmake: no consumer project at ${consumer_source}")
endif()

# Runs a command; on failure prints what it printed and stops the test.
function(run_step description)
  message(STATUS "${description}: ${ARGN}")
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE result OUTPUT_VARIABLE output ERROR_VARIABLE output)
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "${description} failed (${result}):\n${output}")
  endif()
  set(step_output "${output}" PARENT_SCOPE)
endfunction()

file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")

# ---------------------------------------------------------------- a CPU-only environment
set(configure_args "")
if(NO_CUDA)
  # Drop every PATH entry that holds an nvcc, then prove none is left.
  if(CMAKE_HOST_WIN32)
    set(path_separator ";")
    set(nvcc_name nvcc.exe)
  else()
    set(path_separator ":")
    set(nvcc_name nvcc)
  endif()
  string(REPLACE "${path_separator}" ";" path_entries "$ENV{PATH}")
  set(kept_entries "")
  foreach(entry IN LISTS path_entries)
    if(NOT entry STREQUAL "" AND NOT EXISTS "${entry}/${nvcc_name}")
      list(APPEND kept_entries "${entry}")
    endif()
  endforeach()
  string(REPLACE ";" "${path_separator}" stripped_path "${kept_entries}")
  set(ENV{PATH} "${stripped_path}")
  foreach(variable IN ITEMS CUDACXX CUDAHOSTCXX CUDA_PATH CUDA_HOME CUDA_ROOT CUDAToolkit_ROOT NVCC_PREPEND_FLAGS
                            NVCC_APPEND_FLAGS)
    unset(ENV{${variable}})
  endforeach()
  find_program(leaked_nvcc NAMES nvcc NO_CACHE)
  if(leaked_nvcc)
    message(FATAL_ERROR "nvcc is still reachable (${leaked_nvcc}) after stripping PATH")
  endif()
  if(MODE STREQUAL "install" OR MODE STREQUAL "package")
    set(check_no_cuda_lookup ON)
    list(APPEND configure_args "-DCMAKE_MODULE_PATH=${MOECOMP_SOURCE_DIR}/tests/consumer/no_cuda_modules")
  endif()
endif()
string(REPLACE "|" ";" RUN "${RUN}")
string(REPLACE "|" ";" CONSUMER_ARGS "${CONSUMER_ARGS}")
string(REPLACE "|" ";" PACKAGE_ARGS "${PACKAGE_ARGS}")
# Only what we pass may be found: no user or system package registry, no inherited prefix path.
unset(ENV{CMAKE_PREFIX_PATH})
unset(ENV{moecomp_DIR})
unset(ENV{moecomp_ROOT})
list(APPEND configure_args -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF -DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF)

# ---------------------------------------------------------------- install into a fresh prefix
if(MODE STREQUAL "package")
  # What a package manager runs: configure the sources with its options (in the same CPU-only
  # environment when NO_CUDA is set), then install. Nothing is compiled.
  set(MOECOMP_BINARY_DIR "${WORK_DIR}/moecomp-build")
  run_step("configure moecomp for packaging" "${CMAKE_COMMAND}" -S "${MOECOMP_SOURCE_DIR}" -B "${MOECOMP_BINARY_DIR}"
           -G "${GENERATOR}" -DCMAKE_BUILD_TYPE=Release ${PACKAGE_ARGS})
  set(MODE install)
  set(mode_label "package")
endif()
if(MODE STREQUAL "install")
  if(NOT EXISTS "${MOECOMP_BINARY_DIR}/cmake_install.cmake")
    message(FATAL_ERROR "run_consumer.cmake: MOECOMP_BINARY_DIR (${MOECOMP_BINARY_DIR}) is not a configured build tree")
  endif()
  set(staging_prefix "${WORK_DIR}/staging")
  run_step("install" "${CMAKE_COMMAND}" --install "${MOECOMP_BINARY_DIR}" --prefix "${staging_prefix}")

  # Every file under include/ must be installed (a header the install rules miss would only show up
  # for users), and the package files must be there.
  file(GLOB_RECURSE source_headers RELATIVE "${MOECOMP_SOURCE_DIR}/include" "${MOECOMP_SOURCE_DIR}/include/*")
  set(missing "")
  foreach(header IN LISTS source_headers)
    if(NOT EXISTS "${staging_prefix}/include/${header}")
      list(APPEND missing "include/${header}")
    endif()
  endforeach()
  file(GLOB_RECURSE config_files "${staging_prefix}/*/moecompConfig.cmake")
  list(LENGTH config_files config_count)
  if(NOT config_count EQUAL 1)
    message(FATAL_ERROR "expected one moecompConfig.cmake in the install, found: '${config_files}'")
  endif()
  get_filename_component(config_dir "${config_files}" DIRECTORY)
  foreach(package_file IN ITEMS moecompConfigVersion.cmake moecompTargets.cmake moecompOpenMPTargets.cmake
                                moecompCudaTargets.cmake)
    if(NOT EXISTS "${config_dir}/${package_file}")
      list(APPEND missing "${package_file}")
    endif()
  endforeach()
  if(missing)
    list(JOIN missing "\n  " missing_text)
    message(FATAL_ERROR "the install lacks:\n  ${missing_text}")
  endif()

  # The base package must not mention CUDA or OpenMP (their targets are loaded per component), and
  # nothing installed may point back into the source or build tree.
  file(READ "${config_dir}/moecompTargets.cmake" base_targets)
  if(base_targets MATCHES "CUDA::|OpenMP::")
    message(FATAL_ERROR "moecompTargets.cmake refers to CUDA or OpenMP targets:\n${base_targets}")
  endif()
  file(READ "${config_dir}/moecompCudaTargets.cmake" cuda_targets)
  if(NOT cuda_targets MATCHES "CUDA::cudart" OR NOT cuda_targets MATCHES "CUDA::cublas")
    message(FATAL_ERROR "moecompCudaTargets.cmake does not link CUDA::cudart and CUDA::cublas:\n${cuda_targets}")
  endif()
  file(GLOB_RECURSE installed_files "${staging_prefix}/*")
  foreach(installed IN LISTS installed_files)
    file(READ "${installed}" content)
    foreach(tree IN ITEMS "${MOECOMP_SOURCE_DIR}" "${MOECOMP_BINARY_DIR}")
      string(FIND "${content}" "${tree}" position)
      if(NOT position EQUAL -1)
        message(FATAL_ERROR "${installed} refers to ${tree}")
      endif()
    endforeach()
  endforeach()

  # Relocatable: the consumer sees the package only at its new place.
  set(prefix "${WORK_DIR}/prefix")
  file(RENAME "${staging_prefix}" "${prefix}")
  list(APPEND configure_args "-DCMAKE_PREFIX_PATH=${prefix}")
elseif(MODE STREQUAL "subdirectory")
  list(APPEND configure_args "-DMOECOMP_SOURCE_DIR=${MOECOMP_SOURCE_DIR}"
       "-DFETCHCONTENT_SOURCE_DIR_MOECOMP=${MOECOMP_SOURCE_DIR}" -DFETCHCONTENT_FULLY_DISCONNECTED=ON)
else()
  message(FATAL_ERROR "run_consumer.cmake: MODE must be install or subdirectory, got '${MODE}'")
endif()

# ---------------------------------------------------------------- configure, build, run
set(build_dir "${WORK_DIR}/build")
list(APPEND configure_args -G "${GENERATOR}" -DCMAKE_BUILD_TYPE=Release)
if(CXX_COMPILER)
  list(APPEND configure_args "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}")
endif()
if(CUDA_COMPILER)
  list(APPEND configure_args "-DCMAKE_CUDA_COMPILER=${CUDA_COMPILER}")
endif()
if(CUDA_ARCHITECTURES)
  list(APPEND configure_args "-DCMAKE_CUDA_ARCHITECTURES=${CUDA_ARCHITECTURES}")
endif()
run_step("configure ${CONSUMER}" "${CMAKE_COMMAND}" -S "${consumer_source}" -B "${build_dir}" ${configure_args}
         ${CONSUMER_ARGS})
message(STATUS "${step_output}")

# The cache is the record of what the configure looked for: with NO_CUDA, neither a CUDA compiler nor any
# CUDA toolkit variable may appear in it. With MODE=install the package must come from our prefix.
file(STRINGS "${build_dir}/CMakeCache.txt" cache_lines)
foreach(line IN LISTS cache_lines)
  if(check_no_cuda_lookup AND line MATCHES "^(CMAKE_CUDA_COMPILER|CUDAToolkit_|CUDA_TOOLKIT_|CUDA_[a-z]+_LIBRARY)[^=]*=")
    message(FATAL_ERROR "the CPU-only configure recorded a CUDA entry: ${line}")
  endif()
  if(MODE STREQUAL "install" AND line MATCHES "^moecomp_DIR:PATH=(.*)$")
    set(found_dir "${CMAKE_MATCH_1}")
    string(FIND "${found_dir}" "${prefix}/" position)
    if(NOT position EQUAL 0)
      message(FATAL_ERROR "moecomp was found at ${found_dir}, not in the fresh prefix ${prefix}")
    endif()
  endif()
endforeach()

run_step("build ${CONSUMER}" "${CMAKE_COMMAND}" --build "${build_dir}" --config Release)

foreach(program IN LISTS RUN)
  if(CMAKE_HOST_WIN32)
    string(APPEND program ".exe")
  endif()
  set(executable "${build_dir}/${program}")
  if(NOT EXISTS "${executable}")  # multi-config generators
    set(executable "${build_dir}/Release/${program}")
  endif()
  message(STATUS "run: ${executable}")
  execute_process(COMMAND "${executable}" RESULT_VARIABLE result OUTPUT_VARIABLE output ERROR_VARIABLE output)
  message(STATUS "${output}")
  if(result EQUAL 77)
    message(STATUS "${program} skipped its run (exit 77)")
  elseif(NOT result EQUAL 0)
    message(FATAL_ERROR "${program} failed (${result}):\n${output}")
  endif()
endforeach()

# A subproject installs nothing unless the parent asks for it (MOECOMP_INSTALL defaults to OFF there).
if(MODE STREQUAL "subdirectory")
  run_step("install the consumer" "${CMAKE_COMMAND}" --install "${build_dir}" --prefix "${WORK_DIR}/consumer-prefix")
  file(GLOB_RECURSE consumer_installed "${WORK_DIR}/consumer-prefix/*")
  if(consumer_installed)
    message(FATAL_ERROR "installing a project that add_subdirectory's moecomp installed moecomp files:\n"
                        "${consumer_installed}")
  endif()
endif()
if(NOT mode_label)
  set(mode_label "${MODE}")
endif()
message(STATUS "consumer ${CONSUMER} (${mode_label}): passed")
