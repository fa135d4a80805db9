// Included first by every header under a detail/ folder (no include guard: each of them checks). A detail
// header is moecomp's internals: it may change in any release and is not self-contained on purpose. It
// refuses to be the first moecomp header of a translation unit, as Eigen's src/ headers do; include the
// module's public header instead (docs/index.md, "How a module is laid out").
#if !defined(MOECOMP_PUBLIC_HEADER_INCLUDED)
#error "moecomp: detail/ headers are internal; include the module's public header (e.g. <moecomp/ot/sinkhorn.hpp>)"
#endif
