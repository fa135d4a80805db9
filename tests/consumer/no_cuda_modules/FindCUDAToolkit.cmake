# Trap for the CPU-only consumer tests (tests/consumer/run_consumer.cmake puts this folder first on
# CMAKE_MODULE_PATH): find_package(moecomp) without the cuda component must never look for the toolkit.
message(FATAL_ERROR "find_package(CUDAToolkit) was called while configuring a CPU-only consumer of moecomp "
                    "(called from ${CMAKE_PARENT_LIST_FILE})")
