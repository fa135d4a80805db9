// The distance tests again, built without OpenMP: the serial tile loop must give the same answers.
#if defined(_OPENMP)
#error "test_distance_serial must be compiled without OpenMP"
#endif
#include "test_distance.cpp"
