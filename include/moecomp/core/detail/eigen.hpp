#pragma once
// moecomp's one include of Eigen. Every moecomp header that needs Eigen includes it from here, inside the
// GCC < 13 AVX-512 workaround of core/config.hpp, so that Eigen's inlined AVX-512 code never breaks a
// -Werror build. A program that includes <Eigen/Core> itself before any moecomp header gets Eigen without
// the workaround: include a moecomp header first (docs/building.md, "Warnings").
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/core/config.hpp>

MOECOMP_GCC12_AVX512_WARNINGS_OFF
#include <Eigen/Core>
MOECOMP_GCC12_AVX512_WARNINGS_ON
