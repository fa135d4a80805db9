# Packaging tests (included by tests/CMakeLists.txt): at test time, install this build tree into a fresh
# prefix and build the consumer projects of tests/consumer against it, as a user would; and build moecomp
# as a subproject (add_subdirectory, FetchContent). Each test runs tests/consumer/run_consumer.cmake.
# The CPU consumers run with no nvcc on PATH; see run_consumer.cmake for what else they prove.

set(_moecomp_consumer_dir "${PROJECT_SOURCE_DIR}/tests/consumer")
set(_moecomp_consumer_work "${PROJECT_BINARY_DIR}/consumer-tests")

# The consumers use Ninja where it exists (fast configure), else this build's generator.
if(CMAKE_GENERATOR MATCHES "Ninja")
  set(_moecomp_consumer_generator "${CMAKE_GENERATOR}")
else()
  find_program(MOECOMP_NINJA_PROGRAM ninja)
  mark_as_advanced(MOECOMP_NINJA_PROGRAM)
  if(MOECOMP_NINJA_PROGRAM)
    set(_moecomp_consumer_generator Ninja)
  else()
    set(_moecomp_consumer_generator "${CMAKE_GENERATOR}")
  endif()
endif()

# moecomp_add_consumer_test(NAME CONSUMER MODE [NO_CUDA] [CUDA] [RUN programs...] [ARGS -D...]
#                           [PACKAGE_ARGS -D...])
function(moecomp_add_consumer_test name consumer mode)
  cmake_parse_arguments(ARG "NO_CUDA;CUDA" "" "RUN;ARGS;PACKAGE_ARGS" ${ARGN})
  list(JOIN ARG_RUN "|" run)
  list(JOIN ARG_ARGS "|" consumer_args)
  list(JOIN ARG_PACKAGE_ARGS "|" package_args)
  set(command "${CMAKE_COMMAND}" "-DMOECOMP_SOURCE_DIR=${PROJECT_SOURCE_DIR}"
              "-DMOECOMP_BINARY_DIR=${PROJECT_BINARY_DIR}" "-DCONSUMER=${consumer}" "-DMODE=${mode}"
              "-DWORK_DIR=${_moecomp_consumer_work}/${name}" "-DGENERATOR=${_moecomp_consumer_generator}"
              "-DCXX_COMPILER=${CMAKE_CXX_COMPILER}" "-DRUN=${run}" "-DCONSUMER_ARGS=${consumer_args}"
              "-DPACKAGE_ARGS=${package_args}")
  if(ARG_NO_CUDA)
    list(APPEND command -DNO_CUDA=ON)
  endif()
  if(ARG_CUDA)
    list(APPEND command "-DCUDA_COMPILER=${CMAKE_CUDA_COMPILER}" -DCUDA_ARCHITECTURES=80)
  endif()
  list(APPEND command -P "${_moecomp_consumer_dir}/run_consumer.cmake")
  add_test(NAME ${name} COMMAND ${command})
  set_tests_properties(${name} PROPERTIES LABELS "cpu;package" TIMEOUT 300)
endfunction()

if(MOECOMP_INSTALL)
  moecomp_add_consumer_test(consumer_install_cpu cpu install NO_CUDA RUN moecomp_consumer_cpu
                            ARGS -DMOECOMP_CONSUMER_EXPECT_NO_CUDA=ON)
  set(_moecomp_component_programs "")
  if(OpenMP_CXX_FOUND)
    list(APPEND _moecomp_component_programs moecomp_consumer_openmp)
  endif()
  if(nlohmann_json_FOUND)
    list(APPEND _moecomp_component_programs moecomp_consumer_safetensors)
  endif()
  moecomp_add_consumer_test(consumer_install_components components install NO_CUDA RUN ${_moecomp_component_programs})
  # Compiles and links a .cu file against the installed package (sm_80); runs it only if a GPU is there.
  if(MOECOMP_HAVE_CUDA)
    moecomp_add_consumer_test(consumer_install_cuda cuda install CUDA RUN moecomp_consumer_cuda)
  endif()
endif()
# What the vcpkg port (ports/moecomp/portfile.cmake) and the Conan recipe (conanfile.py) run: a fresh
# configure with their options (the port's, which add the config folder share/moecomp), on a machine
# without nvcc, then the install; the consumer must find the package there.
moecomp_add_consumer_test(consumer_packaging_build cpu package NO_CUDA RUN moecomp_consumer_cpu
                          ARGS -DMOECOMP_CONSUMER_EXPECT_NO_CUDA=ON
                          PACKAGE_ARGS -DMOECOMP_INSTALL=ON -DMOECOMP_BUILD_TESTS=OFF -DMOECOMP_BUILD_EXAMPLES=OFF
                                       -DMOECOMP_BUILD_BENCHMARKS=OFF -DMOECOMP_ENABLE_CUDA=OFF
                                       -DMOECOMP_INSTALL_CMAKEDIR=share/moecomp)

# Strict consumers: every public host algorithm, float and double, compiled with -Wall -Wextra -Wpedantic
# -Werror at x86-64-v2, v3 and v4 (AVX-512), by GCC and by Clang, against the installed package; each runs
# where this CPU has the level's features, and is compiled only (exit 77) elsewhere.
find_program(MOECOMP_CLANGXX_PROGRAM NAMES clang++ clang++-14)
mark_as_advanced(MOECOMP_CLANGXX_PROGRAM)
if(MOECOMP_INSTALL)
  set(_moecomp_strict_compilers "gcc|${CMAKE_CXX_COMPILER}")
  if(MOECOMP_CLANGXX_PROGRAM)
    list(APPEND _moecomp_strict_compilers "clang|${MOECOMP_CLANGXX_PROGRAM}")
  else()
    message(STATUS "moecomp: clang++ not found, the strict Clang consumers are not built")
  endif()
  foreach(compiler_entry IN LISTS _moecomp_strict_compilers)
    string(REPLACE "|" ";" compiler_entry "${compiler_entry}")
    list(GET compiler_entry 0 compiler_name)
    list(GET compiler_entry 1 compiler_path)
    foreach(level_entry IN ITEMS "v2|popcnt" "v3|avx2" "v4|avx512bw")
      string(REPLACE "|" ";" level_entry "${level_entry}")
      list(GET level_entry 0 level)
      list(GET level_entry 1 feature)
      set(name consumer_strict_${compiler_name}_${level})
      moecomp_add_consumer_test(${name} strict install NO_CUDA RUN moecomp_consumer_strict
                                ARGS "-DCMAKE_CXX_COMPILER=${compiler_path}"
                                     "-DMOECOMP_STRICT_FLAGS=-Wall -Wextra -Wpedantic -Werror -march=x86-64-${level}"
                                     "-DMOECOMP_STRICT_REQUIRED_CPU_FEATURE=${feature}")
    endforeach()
  endforeach()
  unset(_moecomp_strict_compilers)
endif()

moecomp_add_consumer_test(consumer_subdirectory subdirectory subdirectory NO_CUDA RUN moecomp_consumer_subdirectory)
moecomp_add_consumer_test(consumer_fetchcontent subdirectory subdirectory NO_CUDA RUN moecomp_consumer_subdirectory
                          ARGS -DMOECOMP_CONSUMER_USE_FETCHCONTENT=ON)

unset(_moecomp_consumer_generator)
unset(_moecomp_consumer_dir)
unset(_moecomp_consumer_work)
