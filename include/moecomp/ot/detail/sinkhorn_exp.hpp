#pragma once
// Sinkhorn's exponential: the shared vectorisable exp of core/detail/vector_exp.hpp (about 1 ulp over the
// normal range; subnormal results produced; 0 below about -745 and for -inf, +inf above about 709.78; NaN
// not propagated: callers check their operands for NaN themselves).
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/core/config.hpp>
#include <moecomp/core/detail/vector_exp.hpp>

MOECOMP_NAMESPACE_BEGIN
namespace ot {
namespace detail {

using moecomp::detail::exp_vectorizable;

}  // namespace detail
}  // namespace ot
MOECOMP_NAMESPACE_END
