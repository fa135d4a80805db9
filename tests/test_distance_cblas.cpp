// The distance tests again, with the opt-in CBLAS tile kernel (MOECOMP_USE_CBLAS and a sequential CBLAS).
#if !defined(MOECOMP_USE_CBLAS)
#error "test_distance_cblas must be compiled with MOECOMP_USE_CBLAS"
#endif
#include "test_distance.cpp"
