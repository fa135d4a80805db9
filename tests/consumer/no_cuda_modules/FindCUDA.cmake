# Trap for the CPU-only consumer tests: see FindCUDAToolkit.cmake next to this file.
message(FATAL_ERROR "find_package(CUDA) was called while configuring a CPU-only consumer of moecomp "
                    "(called from ${CMAKE_PARENT_LIST_FILE})")
