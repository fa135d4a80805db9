// moecomp's Python binding (docs/python.md): the host algorithms for researchers, over numpy arrays and any
// object that exports DLPack (torch tensors, ...), read in place.
//
// Inputs: a numpy array is viewed through its buffer; an object with __dlpack__ (a CPU torch tensor) through the
// DLPack capsule it exports, consumed as the protocol asks; anything else goes through numpy.asarray, which may
// copy. Rows must be contiguous (column stride 1; any row stride); a layout the views cannot express is refused
// with the library's message, never silently copied. Outputs are new numpy arrays, or for pdist the caller's
// `out` (any writable numpy array or DLPack tensor, e.g. a torch tensor: written in place).
// The GIL is released while the library computes. Errors: moecomp's invalid_argument becomes ValueError with its
// message ("pdist: x: ..." names the argument); other moecomp errors become RuntimeError.
#include <moecomp/moecomp.hpp>
#include <moecomp/compress/compress.hpp>
#include <moecomp/interop/dlpack.hpp>
#include <moecomp/io/residual_file.hpp>
#include <moecomp/io/safetensors.hpp>
#include <moecomp/model/layout.hpp>

#include <dlpack/dlpack.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

// The checkpoint layouts compress_checkpoint reads by default: the source tree's layouts/ (python/CMakeLists.txt
// and python/setup.py define it).
#ifndef MOECOMP_SOURCE_LAYOUTS_DIR
#define MOECOMP_SOURCE_LAYOUTS_DIR ""
#endif

namespace py = pybind11;
using moecomp::index_t;

namespace {

/// One array argument, viewed in place (see the top of this file). The capsule's deleter runs when this goes,
/// with the GIL held (construct and destroy outside the GIL-released sections).
class tensor_arg {
 public:
  tensor_arg(const char* function, const char* name, py::handle object, bool writable = false)
      : function_(function), name_(name) {
    if (!py::isinstance<py::array>(object) && py::hasattr(object, "__dlpack__")) {
      py::object capsule = object.attr("__dlpack__")();
      PyObject* raw = capsule.ptr();
      if (!PyCapsule_IsValid(raw, "dltensor")) fail("__dlpack__() must return an unconsumed DLPack capsule");
      managed_ = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(raw, "dltensor"));
      // Consumed: the exporter's capsule destructor now leaves the tensor to us (the DLPack protocol).
      if (PyCapsule_SetName(raw, "used_dltensor") != 0) throw py::error_already_set();
      tensor_ = managed_->dl_tensor;
      return;
    }
    array_ = py::array::ensure(object);
    if (!array_) fail("must be an array (numpy, torch or anything numpy.asarray accepts)");
    if (writable && !array_.writeable()) fail("must be writable, got a read-only array");
    describe_array();
  }
  ~tensor_arg() {
    if (managed_ != nullptr && managed_->deleter != nullptr) managed_->deleter(managed_);
  }
  tensor_arg(const tensor_arg&) = delete;
  tensor_arg& operator=(const tensor_arg&) = delete;

  /// Whether the elements are T (float, double, int64, bfloat16, half).
  template <class T>
  bool holds() const noexcept {
    const DLDataType want = moecomp::interop::dlpack_dtype<T>();
    return tensor_.dtype.code == want.code && tensor_.dtype.bits == want.bits && tensor_.dtype.lanes == 1;
  }
  std::string dtype() const { return moecomp::interop::dlpack_dtype_string(tensor_.dtype, false); }
  int ndim() const noexcept { return tensor_.ndim; }
  std::int64_t extent(int axis) const noexcept { return tensor_.shape[axis]; }

  template <class T>
  moecomp::matrix_view<T> matrix() const {
    return checked([&] { return moecomp::as_matrix_view<T>(tensor_); });
  }
  template <class T>
  moecomp::vector_view<T> vector() const {
    return checked([&] { return moecomp::as_vector_view<T>(tensor_); });
  }
  template <class T>
  moecomp::matrix_stack_view<T> stack() const {
    return checked([&] { return moecomp::as_matrix_stack_view<T>(tensor_); });
  }
  /// The address the library reads (tests check that nothing was copied).
  std::uintptr_t address() const noexcept {
    return reinterpret_cast<std::uintptr_t>(static_cast<const char*>(tensor_.data) + tensor_.byte_offset);
  }
  [[noreturn]] void fail(const std::string& what) const {
    throw py::value_error(std::string(function_) + ": " + name_ + " " + what);
  }

 private:
  template <class F>
  auto checked(F make) const {
    try {
      return make();
    } catch (const moecomp::invalid_argument& e) {
      throw py::value_error(std::string(function_) + ": " + name_ + ": " + e.what());
    }
  }

  /// A DLTensor over the numpy array's buffer (strides in elements; a stride that is not a whole number of
  /// elements cannot be viewed).
  void describe_array() {
    const py::dtype dt = array_.dtype();
    tensor_.data = const_cast<void*>(array_.data());
    tensor_.device = DLDevice{kDLCPU, 0};
    tensor_.ndim = static_cast<std::int32_t>(array_.ndim());
    tensor_.dtype.lanes = 1;
    tensor_.dtype.bits = static_cast<std::uint8_t>(8 * dt.itemsize());
    tensor_.dtype.code = dt.kind() == 'f' ? kDLFloat : dt.kind() == 'i' ? kDLInt : dt.kind() == 'u' ? kDLUInt : 255;
    for (py::ssize_t a = 0; a < array_.ndim(); ++a) {
      shape_.push_back(static_cast<std::int64_t>(array_.shape(a)));
      if (array_.strides(a) % dt.itemsize() != 0) fail("must have strides that are whole elements");
      strides_.push_back(static_cast<std::int64_t>(array_.strides(a) / dt.itemsize()));
    }
    tensor_.shape = shape_.data();
    tensor_.strides = strides_.data();
    tensor_.byte_offset = 0;
  }

  const char* function_;
  const char* name_;
  py::array array_;
  DLManagedTensor* managed_ = nullptr;
  DLTensor tensor_{};
  std::vector<std::int64_t> shape_, strides_;
};

/// make() with moecomp's argument errors prefixed by the binding's function name ("pdist: metric: expected ...",
/// "pdist: pairwise_distances_condensed: out must have ..."), unless the message already starts with it.
template <class F>
auto named(const char* function, F make) {
  try {
    return make();
  } catch (const moecomp::invalid_argument& e) {
    const std::string prefix = std::string(function) + ": ", message = e.what();
    throw py::value_error(message.compare(0, prefix.size(), prefix) == 0 ? message : prefix + message);
  }
}

/// Runs body<T>() for T = float or double, the element type of `a`; TypeError otherwise.
template <class Body>
py::object on_real(const char* function, const tensor_arg& a, const char* name, Body body) {
  if (a.holds<float>()) return body(float{});
  if (a.holds<double>()) return body(double{});
  throw py::type_error(std::string(function) + ": " + name + " must be float32 or float64, got " + a.dtype());
}

/// The same element type as `first` (named first_name), for every further argument.
template <class T>
void require_same(const char* function, const tensor_arg& a, const char* name, const char* first_name) {
  if (!a.holds<T>())
    throw py::type_error(std::string(function) + ": " + name + " must have " + first_name + "'s dtype (" +
                         moecomp::interop::dlpack_dtype_string(moecomp::interop::dlpack_dtype<T>(), false) +
                         "), got " + a.dtype());
}

template <class T>
py::array_t<T> new_matrix(index_t rows, index_t cols) {
  return py::array_t<T>({static_cast<py::ssize_t>(rows), static_cast<py::ssize_t>(cols)});
}

template <class T>
moecomp::matrix_view<T> view_of(py::array_t<T>& a) {
  return moecomp::matrix_view<T>(a.mutable_data(), static_cast<index_t>(a.shape(0)), static_cast<index_t>(a.shape(1)));
}

// ---------------------------------------------------------------------------------------------- shared helpers

/// The type of a dispatch (on_weight): body(type_tag<W>{}) for W the element type of an argument.
template <class T>
struct type_tag {
  using type = T;
};

/// Runs body(type_tag<W>{}) for W = float, double, bfloat16 or half, the element type of `a`; TypeError otherwise.
template <class Body>
py::object on_weight(const char* function, const tensor_arg& a, const char* name, Body body) {
  if (a.holds<float>()) return body(type_tag<float>{});
  if (a.holds<double>()) return body(type_tag<double>{});
  if (a.holds<moecomp::bfloat16>()) return body(type_tag<moecomp::bfloat16>{});
  if (a.holds<moecomp::half>()) return body(type_tag<moecomp::half>{});
  throw py::type_error(std::string(function) + ": " + name + " must be float32, float64, bfloat16 or float16, got " +
                       a.dtype());
}

/// A numpy array that takes over `v` (no copy); its capsule frees the vector.
template <class T>
py::array_t<T> owned_array(std::vector<T>&& v, std::vector<py::ssize_t> shape) {
  if (v.empty()) return py::array_t<T>(shape);
  auto* heap = new std::vector<T>(std::move(v));
  py::capsule owner(heap, [](void* p) { delete static_cast<std::vector<T>*>(p); });
  return py::array_t<T>(shape, heap->data(), owner);
}

py::bytes bytes_of(const std::vector<std::uint8_t>& v) {
  return py::bytes(reinterpret_cast<const char*>(v.data()), v.size());
}

/// An optional argument viewed in place (none: nullopt).
std::optional<tensor_arg> optional_arg(const char* fn, const char* name, py::handle object) {
  if (object.is_none()) return std::nullopt;
  return std::optional<tensor_arg>(std::in_place, fn, name, object);
}

/// The expert stacks PREFIXw1, PREFIXw3 (optional) and PREFIXw2 of storage W (each E x rows x cols), viewed in
/// place; w1 names the dtype they share.
template <class W>
moecomp::moe::ffn_expert_stack_view<W> expert_stack(const char* fn, const tensor_arg& w1, const tensor_arg& w2,
                                                    const std::optional<tensor_arg>& w3, const std::string& prefix = "") {
  moecomp::moe::ffn_expert_stack_view<W> s;
  const std::string n1 = prefix + "w1", n2 = prefix + "w2", n3 = prefix + "w3";
  require_same<W>(fn, w1, n1.c_str(), "w1");
  require_same<W>(fn, w2, n2.c_str(), "w1");
  s.w1 = w1.stack<const W>();
  s.w2 = w2.stack<const W>();
  if (w3) {
    require_same<W>(fn, *w3, n3.c_str(), "w1");
    s.w3 = w3->stack<const W>();
  }
  return s;
}

/// One expert (w1, w3 optional, w2: matrices) of storage W, viewed in place.
template <class W>
moecomp::moe::ffn_expert_view<W> expert_matrices(const char* fn, const tensor_arg& w1, const tensor_arg& w2,
                                                 const std::optional<tensor_arg>& w3, const char* w2_name,
                                                 const char* w3_name, const char* first) {
  moecomp::moe::ffn_expert_view<W> e;
  require_same<W>(fn, w2, w2_name, first);
  e.w1 = w1.matrix<const W>();
  e.w2 = w2.matrix<const W>();
  if (w3) {
    require_same<W>(fn, *w3, w3_name, first);
    e.w3 = w3->matrix<const W>();
  }
  return e;
}

/// An int64 vector argument (permutations, expert maps) viewed in place.
moecomp::vector_view<const index_t> index_vector(const char* fn, const tensor_arg& a, const char* name) {
  if (!a.holds<std::int64_t>()) throw py::type_error(std::string(fn) + ": " + name + " must be int64, got " + a.dtype());
  return a.vector<const index_t>();
}

moecomp::gating::routing_params routing_params_from(const char* fn, const std::string& rule, index_t top_k,
                                                    const std::string& scores, bool renormalize, double tau,
                                                    index_t min_k, index_t max_k, index_t n_group, index_t topk_group,
                                                    double routed_scaling_factor) {
  moecomp::gating::routing_params params;
  params.rule = named(fn, [&] { return moecomp::gating::parse_routing_rule(rule); });
  params.scores = named(fn, [&] { return moecomp::gating::parse_score_function(scores); });
  params.top_k = top_k;
  params.renormalize = renormalize;
  params.tau = tau;
  params.min_k = min_k;
  params.max_k = max_k;
  params.n_group = n_group;
  params.topk_group = topk_group;
  params.routed_scaling_factor = routed_scaling_factor;
  return params;
}

moecomp::sparse::prune_params prune_params_from(const char* fn, std::optional<double> sparsity,
                                                std::optional<double> keep, const std::string& scope,
                                                index_t column_block, index_t n, index_t m) {
  moecomp::sparse::prune_params params;
  params.scope = named(fn, [&] { return moecomp::sparse::parse_prune_scope(scope); });
  if (params.scope != moecomp::sparse::prune_scope::n_of_m && sparsity.has_value() == keep.has_value())
    throw py::value_error(std::string(fn) + ": give exactly one of sparsity and keep");
  params.sparsity = sparsity.value_or(-1.0);
  params.keep = keep.value_or(-1.0);
  params.column_block = column_block;
  params.n = n;
  params.m = m;
  return params;
}

py::dict prune_info(const moecomp::sparse::prune_result& r) {
  py::dict d;
  d["kept"] = r.kept;
  d["pruned"] = r.pruned;
  d["threshold"] = r.threshold;
  return d;
}

/// A residual (the bytes of a moecomp residual file, docs/sparse.md) parsed and checked; ValueError naming the
/// argument when malformed.
moecomp::io::residual_file residual_arg(const char* fn, const char* name, py::handle object) {
  if (!PyObject_CheckBuffer(object.ptr()))
    throw py::type_error(std::string(fn) + ": " + name + " must be bytes (a moecomp residual file's), got " +
                         std::string(py::str(py::type::handle_of(object).attr("__name__"))));
  const py::buffer_info info = py::reinterpret_borrow<py::buffer>(object).request();
  if (info.ndim > 1 || (info.ndim == 1 && info.strides[0] != info.itemsize))
    throw py::value_error(std::string(fn) + ": " + name + " must be contiguous bytes");
  try {
    return moecomp::io::parse_residual(info.ptr, static_cast<std::size_t>(info.size * info.itemsize), name);
  } catch (const moecomp::error& e) {
    throw py::value_error(std::string(fn) + ": " + e.what());
  }
}

py::object pdist(py::handle x, const std::string& metric, int threads, py::handle out) {
  constexpr const char* fn = "pdist";
  const tensor_arg xa(fn, "x", x);
  moecomp::distance::pairwise_distance_params params;
  params.metric = named(fn, [&] { return moecomp::distance::parse_metric(metric); });
  const moecomp::host_context ctx(threads);
  return on_real(fn, xa, "x", [&](auto tag) -> py::object {
    using T = decltype(tag);
    const moecomp::matrix_view<const T> xv = xa.matrix<const T>();
    const index_t n = xv.rows(), count = moecomp::distance::condensed_size(n);
    if (out.is_none()) {
      py::array_t<T> result(static_cast<py::ssize_t>(count));
      const moecomp::vector_view<T> ov(result.mutable_data(), count);
      py::gil_scoped_release release;
      named(fn, [&] { moecomp::distance::pairwise_distances_condensed<T>(ctx, params, xv, ov); return 0; });
      return std::move(result);
    }
    const tensor_arg oa(fn, "out", out, true);
    require_same<T>(fn, oa, "out", "x");
    const moecomp::vector_view<T> ov = oa.vector<T>();
    {
      py::gil_scoped_release release;
      named(fn, [&] { moecomp::distance::pairwise_distances_condensed<T>(ctx, params, xv, ov); return 0; });
    }
    return py::reinterpret_borrow<py::object>(out);
  });
}

py::object linkage(py::handle x, const std::string& method, const std::string& metric, int threads) {
  constexpr const char* fn = "linkage";
  const tensor_arg xa(fn, "x", x);
  moecomp::cluster::linkage_params params;
  params.method = named(fn, [&] { return moecomp::cluster::parse_linkage_method(method); });
  params.metric = named(fn, [&] { return moecomp::distance::parse_metric(metric); });
  const moecomp::host_context ctx(threads);
  return on_real(fn, xa, "x", [&](auto tag) -> py::object {
    using T = decltype(tag);
    const moecomp::matrix_view<const T> xv = xa.matrix<const T>();
    py::array_t<double> z = new_matrix<double>(xv.rows() > 0 ? xv.rows() - 1 : 0, 4);
    const moecomp::matrix_view<double> zv = view_of(z);
    {
      py::gil_scoped_release release;
      named(fn, [&] { moecomp::cluster::linkage(ctx, params, xv, zv); return 0; });
    }
    return std::move(z);
  });
}

py::object route(py::handle logits, const std::string& rule, index_t top_k, const std::string& scores,
                 bool renormalize, double tau, index_t min_k, index_t max_k, index_t n_group, index_t topk_group,
                 double routed_scaling_factor, py::handle bias, int threads) {
  constexpr const char* fn = "route";
  const tensor_arg la(fn, "logits", logits);
  const moecomp::gating::routing_params params = routing_params_from(
      fn, rule, top_k, scores, renormalize, tau, min_k, max_k, n_group, topk_group, routed_scaling_factor);
  const moecomp::host_context ctx(threads);
  return on_real(fn, la, "logits", [&](auto tag) -> py::object {
    using T = decltype(tag);
    const moecomp::matrix_view<const T> lv = la.matrix<const T>();
    std::optional<tensor_arg> ba;
    moecomp::vector_view<const T> bv;
    if (!bias.is_none()) {
      ba.emplace(fn, "bias", bias);
      require_same<T>(fn, *ba, "bias", "logits");
      bv = ba->vector<const T>();
    }
    const index_t k = moecomp::gating::max_experts_per_token(params, lv.cols());
    py::array_t<std::int64_t> ids = new_matrix<std::int64_t>(lv.rows(), k);
    py::array_t<T> weights = new_matrix<T>(lv.rows(), k);
    const moecomp::matrix_view<std::int64_t> iv = view_of(ids);
    const moecomp::matrix_view<T> wv = view_of(weights);
    {
      py::gil_scoped_release release;
      named(fn, [&] { return moecomp::gating::route_fixed<T>(ctx, params, lv, bv, iv, wv); });
    }
    return py::make_tuple(ids, weights);
  });
}

py::dict cka(py::handle x, py::handle y, const std::string& kernel, bool debiased, double sigma, double threshold,
             int threads) {
  constexpr const char* fn = "cka";
  const tensor_arg xa(fn, "x", x), ya(fn, "y", y);
  moecomp::similarity::cka_params params;
  params.kernel = named(fn, [&] { return moecomp::similarity::parse_cka_kernel(kernel); });
  params.unbiased = debiased;
  params.sigma = sigma;
  params.threshold = threshold;
  const moecomp::host_context ctx(threads);
  moecomp::similarity::cka_result r;
  on_real(fn, xa, "x", [&](auto tag) -> py::object {
    using T = decltype(tag);
    require_same<T>(fn, ya, "y", "x");
    const moecomp::matrix_view<const T> xv = xa.matrix<const T>(), yv = ya.matrix<const T>();
    py::gil_scoped_release release;
    r = named(fn, [&] { return moecomp::similarity::cka<T>(ctx, params, xv, yv); });
    return py::none();
  });
  py::dict d;
  d["cka"] = r.cka;
  d["hsic_xy"] = r.hsic_xy;
  d["hsic_xx"] = r.hsic_xx;
  d["hsic_yy"] = r.hsic_yy;
  d["status"] = moecomp::similarity::to_string(r.status);
  d["sigma_x"] = r.sigma_x;
  d["sigma_y"] = r.sigma_y;
  return d;
}

py::tuple emd(py::handle a, py::handle b, py::handle cost, std::int64_t max_iterations, double mass_tolerance,
              int threads) {
  constexpr const char* fn = "emd";
  const tensor_arg aa(fn, "a", a), ba(fn, "b", b), ca(fn, "cost", cost);
  moecomp::ot::emd_params params;
  params.max_iterations = max_iterations;
  params.mass_tolerance = mass_tolerance;
  const moecomp::host_context ctx(threads);
  moecomp::ot::emd_result r;
  py::array_t<double> plan;
  on_real(fn, aa, "a", [&](auto tag) -> py::object {
    using T = decltype(tag);
    require_same<T>(fn, ba, "b", "a");
    require_same<T>(fn, ca, "cost", "a");
    const moecomp::vector_view<const T> av = aa.vector<const T>(), bv = ba.vector<const T>();
    const moecomp::matrix_view<const T> cv = ca.matrix<const T>();
    plan = new_matrix<double>(cv.rows(), cv.cols());
    const moecomp::matrix_view<double> pv = view_of(plan);
    py::gil_scoped_release release;
    r = named(fn, [&] { return moecomp::ot::emd(ctx, params, av, bv, cv, pv); });
    return py::none();
  });
  return py::make_tuple(plan, r.cost, moecomp::to_string(r.status));
}

py::dict kmeans(py::handle x, index_t k, const std::string& init, py::handle centers, py::handle sample_weight,
               index_t restarts, index_t max_iterations, double tolerance, std::uint64_t seed, index_t size_min,
               index_t size_max, int threads) {
  constexpr const char* fn = "kmeans";
  const tensor_arg xa(fn, "x", x);
  moecomp::cluster::kmeans_params params;
  params.clusters = k;
  params.init = centers.is_none() ? named(fn, [&] { return moecomp::cluster::parse_kmeans_init(init); })
                                  : moecomp::cluster::kmeans_init::given;
  params.restarts = restarts;
  params.max_iterations = max_iterations;
  params.tolerance = tolerance;
  params.seed = seed;
  params.size_min = size_min;
  params.size_max = size_max;
  const moecomp::host_context ctx(threads);
  py::dict d;
  on_real(fn, xa, "x", [&](auto tag) -> py::object {
    using T = decltype(tag);
    const moecomp::matrix_view<const T> xv = xa.matrix<const T>();
    py::array_t<T> c = new_matrix<T>(k, xv.cols());
    if (!centers.is_none()) {  // the given start, copied: the result's centres are new
      const tensor_arg ca(fn, "centers", centers);
      require_same<T>(fn, ca, "centers", "x");
      const moecomp::matrix_view<const T> cv = ca.matrix<const T>();
      if (cv.rows() != k || cv.cols() != xv.cols())
        ca.fail("must be k x d = " + std::to_string(k) + " x " + std::to_string(xv.cols()) + ", got " +
                std::to_string(cv.rows()) + " x " + std::to_string(cv.cols()));
      for (index_t r = 0; r < k; ++r)
        for (index_t col = 0; col < cv.cols(); ++col) c.mutable_at(r, col) = cv(r, col);
    }
    std::optional<tensor_arg> wa;
    moecomp::vector_view<const T> wv;
    if (!sample_weight.is_none()) {
      wa.emplace(fn, "sample_weight", sample_weight);
      require_same<T>(fn, *wa, "sample_weight", "x");
      wv = wa->vector<const T>();
    }
    py::array_t<std::int64_t> labels(static_cast<py::ssize_t>(xv.rows()));
    py::array_t<index_t> sizes(static_cast<py::ssize_t>(k));
    const moecomp::matrix_view<T> cview = view_of(c);
    const moecomp::vector_view<std::int64_t> lv(labels.mutable_data(), xv.rows());
    const moecomp::vector_view<index_t> sv(sizes.mutable_data(), k);
    moecomp::cluster::kmeans_result r;
    {
      py::gil_scoped_release release;
      r = named(fn, [&] { return moecomp::cluster::kmeans<T>(ctx, params, xv, wv, cview, lv, sv); });
    }
    d["centers"] = c;
    d["labels"] = labels;
    d["sizes"] = sizes;
    d["inertia"] = r.inertia;
    d["iterations"] = r.iterations;
    d["status"] = moecomp::to_string(r.status);
    return py::none();
  });
  return d;
}

py::tuple linear_sum_assignment(py::handle cost, bool maximize, int threads) {
  constexpr const char* fn = "linear_sum_assignment";
  const tensor_arg ca(fn, "cost", cost);
  moecomp::ot::linear_assignment_params params;
  params.maximize = maximize;
  const moecomp::host_context ctx(threads);
  py::array_t<index_t> rows, cols;
  moecomp::ot::linear_assignment_result r;
  on_real(fn, ca, "cost", [&](auto tag) -> py::object {
    using T = decltype(tag);
    const moecomp::matrix_view<const T> cv = ca.matrix<const T>();
    if (cv.rows() > cv.cols())  // scipy's rule for tall costs: solve the transpose
      ca.fail("must have at most as many rows as columns, got " + std::to_string(cv.rows()) + " x " +
              std::to_string(cv.cols()) + " (pass its transpose)");
    rows = py::array_t<index_t>(static_cast<py::ssize_t>(cv.rows()));
    cols = py::array_t<index_t>(static_cast<py::ssize_t>(cv.rows()));
    for (index_t i = 0; i < cv.rows(); ++i) rows.mutable_at(i) = i;
    const moecomp::vector_view<index_t> assignment(cols.mutable_data(), cv.rows());
    py::gil_scoped_release release;
    r = named(fn, [&] { return moecomp::ot::linear_assignment(ctx, params, cv, assignment); });
    return py::none();
  });
  return py::make_tuple(rows, cols, r.cost, moecomp::to_string(r.status));
}

py::tuple sinkhorn(py::handle a, py::handle b, py::handle cost, double reg, const std::string& method,
                   index_t max_iterations, double tolerance, int threads) {
  constexpr const char* fn = "sinkhorn";
  const tensor_arg aa(fn, "a", a), ba(fn, "b", b), ca(fn, "cost", cost);
  moecomp::ot::sinkhorn_params params;
  params.reg = reg;
  params.method = named(fn, [&] { return moecomp::ot::parse_sinkhorn_method(method); });
  params.max_iterations = max_iterations;
  params.tolerance = tolerance;
  const moecomp::host_context ctx(threads);
  py::object plan;
  moecomp::ot::sinkhorn_result r;
  on_real(fn, aa, "a", [&](auto tag) -> py::object {
    using T = decltype(tag);
    require_same<T>(fn, ba, "b", "a");
    require_same<T>(fn, ca, "cost", "a");
    const moecomp::vector_view<const T> av = aa.vector<const T>(), bv = ba.vector<const T>();
    const moecomp::matrix_view<const T> cv = ca.matrix<const T>();
    py::array_t<T> p = new_matrix<T>(cv.rows(), cv.cols());
    const moecomp::matrix_view<T> pv = view_of(p);
    {
      py::gil_scoped_release release;
      r = named(fn, [&] { return moecomp::ot::sinkhorn<T>(ctx, params, av, bv, cv, pv); });
    }
    plan = p;
    return py::none();
  });
  return py::make_tuple(plan, r.cost, moecomp::to_string(r.status), r.iterations);
}

/// A new numpy array for weights of storage W: W's own dtype for float and double, float16 for half, and int16
/// holding the bits for bfloat16 (numpy has no bfloat16; weights_result gives torch a bfloat16 view of it; int16,
/// because torch.from_numpy takes no uint16).
template <class W>
py::array new_weight_array(std::vector<py::ssize_t> shape) {
  if constexpr (std::is_same_v<W, moecomp::half>) return py::array(py::dtype("float16"), shape);
  else if constexpr (std::is_same_v<W, moecomp::bfloat16>) return py::array(py::dtype("int16"), shape);
  else return py::array_t<W>(shape);
}

/// What merge_experts returns for a weight array: bfloat16 bits as a torch.bfloat16 tensor (a view, no copy),
/// everything else as the numpy array.
template <class W>
py::object weights_result(const py::array& a) {
  if constexpr (std::is_same_v<W, moecomp::bfloat16>) {
    const py::module_ torch = py::module_::import("torch");
    return torch.attr("from_numpy")(a).attr("view")(torch.attr("bfloat16"));
  } else {
    return a;
  }
}

/// The element type `a` must have: A's, for an argument that goes with weights of storage W (named by `why`).
template <class A>
void require_dtype(const char* function, const tensor_arg& a, const char* name, const char* why) {
  if (!a.holds<A>())
    throw py::type_error(std::string(function) + ": " + name + " must be " +
                         moecomp::interop::dlpack_dtype_string(moecomp::interop::dlpack_dtype<A>(), false) + " (" +
                         why + "), got " + a.dtype());
}

/// merge_experts over stacks of storage W (float, double, bfloat16, half); x and the router in A = accumulator_t<W>.
template <class W>
py::dict merge_stacks(const char* fn, const tensor_arg& w1a, const tensor_arg& w2a, const tensor_arg* w3a,
                      const tensor_arg& ga, const tensor_arg* xa, const tensor_arg* ra, const tensor_arg* fa,
                      const moecomp::merge::merge_params& params, int threads) {
  namespace mm = moecomp::merge;
  using A = moecomp::accumulator_t<W>;
  const char* why = std::is_same_v<W, A> ? "w1's dtype" : "float32 for 16-bit weights";
  mm::merge_data<A> data;
  moecomp::moe::ffn_expert_stack_view<W> experts;
  require_same<W>(fn, w2a, "w2", "w1");
  experts.w1 = w1a.stack<const W>();
  experts.w2 = w2a.stack<const W>();
  if (w3a != nullptr) {
    require_same<W>(fn, *w3a, "w3", "w1");
    experts.w3 = w3a->stack<const W>();
  }
  if (!ga.holds<std::int64_t>())
    throw py::type_error(std::string(fn) + ": groups must be int64, got " + ga.dtype());
  const moecomp::vector_view<const std::int64_t> groups = ga.vector<const std::int64_t>();
  if (xa != nullptr) {
    require_dtype<A>(fn, *xa, "x", why);
    data.x = xa->matrix<const A>();
  }
  if (ra != nullptr) {
    require_dtype<A>(fn, *ra, "router", why);
    data.router = ra->matrix<const A>();
  }
  if (fa != nullptr) {
    if (!fa->holds<double>())
      throw py::type_error(std::string(fn) + ": frequencies must be float64, got " + fa->dtype());
    data.frequencies = fa->vector<const double>();
  }
  const index_t g = named(fn, [&] { return mm::group_count(groups); }), d = experts.d_model(), d_ff = experts.d_ff();
  const mm::router_rule rule = mm::resolve_router_rule(params, !data.router.empty());
  const auto stack_array = [&](index_t rows, index_t cols) {
    return new_weight_array<W>({static_cast<py::ssize_t>(g), static_cast<py::ssize_t>(rows), static_cast<py::ssize_t>(cols)});
  };
  py::array o1 = stack_array(d_ff, d), o2 = stack_array(d, d_ff), o3 = stack_array(experts.gated() ? d_ff : 0, d);
  py::array_t<A> orouter = new_matrix<A>(rule == mm::router_rule::id_map ? 0 : g, d);
  py::array_t<std::int64_t> omap(static_cast<py::ssize_t>(groups.size()));
  const auto data_of = [](py::array& a) { return static_cast<W*>(a.mutable_data()); };
  mm::merge_outputs<W> out;
  out.experts.w1 = moecomp::matrix_stack_view<W>(data_of(o1), g, d_ff, d, d, d_ff * d);
  out.experts.w2 = moecomp::matrix_stack_view<W>(data_of(o2), g, d, d_ff, d_ff, d * d_ff);
  if (experts.gated()) out.experts.w3 = moecomp::matrix_stack_view<W>(data_of(o3), g, d_ff, d, d, d_ff * d);
  if (rule != mm::router_rule::id_map) out.router = view_of(orouter);
  out.map = moecomp::vector_view<std::int64_t>(omap.mutable_data(), groups.size());
  const moecomp::host_context ctx(threads);
  mm::merge_report report;
  {
    py::gil_scoped_release release;
    report = named(fn, [&] { return mm::merge_experts<W>(ctx, params, experts, groups, data, out); });
  }
  py::dict result;
  result["w1"] = weights_result<W>(o1);
  result["w2"] = weights_result<W>(o2);
  result["w3"] = experts.gated() ? weights_result<W>(o3) : py::object(py::none());
  result["router"] = rule == mm::router_rule::id_map ? py::object(py::none()) : py::object(orouter);
  result["map"] = omap;
  result["router_rule"] = mm::to_string(report.router);
  result["coefficients"] = report.coefficients;
  std::vector<index_t> dominants, tokens;
  std::vector<double> errors, objectives;
  for (const mm::merge_group_report& gr : report.groups) {
    dominants.push_back(gr.dominant);
    tokens.push_back(gr.tokens);
    errors.push_back(gr.error);
    objectives.push_back(gr.objective_final);
  }
  result["dominants"] = dominants;
  result["tokens"] = tokens;
  result["errors"] = errors;
  result["objectives"] = objectives;
  result["status"] = moecomp::to_string(report.status);
  return result;
}

py::dict merge_experts(py::handle w1, py::handle w2, py::handle groups, py::handle w3, const std::string& method,
                       py::handle x, py::handle router, py::handle frequencies, const std::string& activation,
                       const std::string& router_rule, index_t routing_top_k, index_t frequency_top_k,
                       index_t token_cap, std::uint64_t seed, int max_iterations, bool report_errors, int threads) {
  constexpr const char* fn = "merge_experts";
  namespace mm = moecomp::merge;
  const tensor_arg w1a(fn, "w1", w1), w2a(fn, "w2", w2), ga(fn, "groups", groups);
  std::optional<tensor_arg> w3a, xa, ra, fa;
  if (!w3.is_none()) w3a.emplace(fn, "w3", w3);
  if (!x.is_none()) xa.emplace(fn, "x", x);
  if (!router.is_none()) ra.emplace(fn, "router", router);
  if (!frequencies.is_none()) fa.emplace(fn, "frequencies", frequencies);
  mm::merge_params params;
  params.method = named(fn, [&] { return mm::parse_merge_method(method); });
  params.router = named(fn, [&] { return mm::parse_router_rule(router_rule); });
  params.forward.act = named(fn, [&] { return moecomp::moe::parse_activation(activation); });
  params.align.forward.act = params.forward.act;
  params.routing_top_k = routing_top_k;
  params.frequency_top_k = frequency_top_k;
  params.token_cap = token_cap;
  params.seed = seed;
  params.max_iterations = max_iterations;
  params.report_errors = report_errors;
  const auto opt = [](const std::optional<tensor_arg>& a) { return a ? &*a : nullptr; };
  if (w1a.holds<float>())
    return merge_stacks<float>(fn, w1a, w2a, opt(w3a), ga, opt(xa), opt(ra), opt(fa), params, threads);
  if (w1a.holds<double>())
    return merge_stacks<double>(fn, w1a, w2a, opt(w3a), ga, opt(xa), opt(ra), opt(fa), params, threads);
  if (w1a.holds<moecomp::bfloat16>())
    return merge_stacks<moecomp::bfloat16>(fn, w1a, w2a, opt(w3a), ga, opt(xa), opt(ra), opt(fa), params, threads);
  if (w1a.holds<moecomp::half>())
    return merge_stacks<moecomp::half>(fn, w1a, w2a, opt(w3a), ga, opt(xa), opt(ra), opt(fa), params, threads);
  throw py::type_error(std::string(fn) + ": w1 must be float32, float64, bfloat16 or float16, got " + w1a.dtype());
}

py::array_t<double> normal(index_t rows, index_t cols, std::uint64_t seed, std::uint64_t stream) {
  if (rows < 0 || cols < 0)
    throw py::value_error("normal: rows and cols must be >= 0, got " + std::to_string(rows) + " x " +
                          std::to_string(cols));
  py::array_t<double> out = new_matrix<double>(rows, cols);
  moecomp::random_generator rng(seed, stream);
  double* v = out.mutable_data();
  for (index_t i = 0; i < rows * cols; ++i) v[i] = rng.normal<double>();
  return out;
}

// ---------------------------------------------------------------------------------------------- align

py::tuple align_rows(py::handle a, py::handle b, const std::string& objective, int threads) {
  constexpr const char* fn = "align_rows";
  const tensor_arg aa(fn, "a", a), ba(fn, "b", b);
  moecomp::align::align_params params;
  params.objective = named(fn, [&] { return moecomp::align::parse_align_objective(objective); });
  const moecomp::host_context ctx(threads);
  py::array_t<index_t> p;
  moecomp::align::align_result r;
  on_real(fn, aa, "a", [&](auto tag) -> py::object {
    using T = decltype(tag);
    require_same<T>(fn, ba, "b", "a");
    const moecomp::matrix_view<const T> av = aa.matrix<const T>(), bv = ba.matrix<const T>();
    p = py::array_t<index_t>(static_cast<py::ssize_t>(av.rows()));
    const moecomp::vector_view<index_t> pv(p.mutable_data(), av.rows());
    py::gil_scoped_release release;
    r = named(fn, [&] { return moecomp::align::align_rows<T>(ctx, params, av, bv, pv); });
    return py::none();
  });
  return py::make_tuple(p, r.cost, moecomp::to_string(r.status));
}

py::tuple align_stack(py::handle w1, py::handle w2, py::handle w3, index_t reference, const std::string& objective,
                      py::handle x, const std::string& activation, int threads) {
  constexpr const char* fn = "align_stack";
  const tensor_arg w1a(fn, "w1", w1), w2a(fn, "w2", w2);
  const std::optional<tensor_arg> w3a = optional_arg(fn, "w3", w3), xa = optional_arg(fn, "x", x);
  moecomp::align::align_params params;
  params.objective = named(fn, [&] { return moecomp::align::parse_align_objective(objective); });
  params.forward.act = named(fn, [&] { return moecomp::moe::parse_activation(activation); });
  const moecomp::host_context ctx(threads);
  py::array_t<index_t> perms;
  moecomp::align::align_result r;
  on_weight(fn, w1a, "w1", [&](auto tag) -> py::object {
    using W = typename decltype(tag)::type;
    using A = moecomp::accumulator_t<W>;
    const auto stack = expert_stack<W>(fn, w1a, w2a, w3a);
    moecomp::matrix_view<const A> xv;
    if (xa) {
      require_dtype<A>(fn, *xa, "x", std::is_same_v<W, A> ? "w1's dtype" : "float32 for 16-bit weights");
      xv = xa->matrix<const A>();
    }
    perms = new_matrix<index_t>(stack.experts(), stack.d_ff());
    const moecomp::matrix_view<index_t> pv = view_of(perms);
    py::gil_scoped_release release;
    r = named(fn, [&] { return moecomp::align::align_stack<W>(ctx, params, stack, reference, xv, pv); });
    return py::none();
  });
  return py::make_tuple(perms, r.cost, moecomp::to_string(r.status));
}

py::object design_matrix(py::handle w1, py::handle w2, py::handle w3, int threads) {
  constexpr const char* fn = "design_matrix";
  const tensor_arg w1a(fn, "w1", w1), w2a(fn, "w2", w2);
  const std::optional<tensor_arg> w3a = optional_arg(fn, "w3", w3);
  const moecomp::host_context ctx(threads);
  return on_weight(fn, w1a, "w1", [&](auto tag) -> py::object {
    using W = typename decltype(tag)::type;
    using A = moecomp::accumulator_t<W>;
    const auto e = expert_matrices<W>(fn, w1a, w2a, w3a, "w2", "w3", "w1");
    const index_t width = moecomp::align::design_width(e);  // design_matrix checks the shapes
    py::array_t<A> out = new_matrix<A>(e.d_ff(), width);
    const moecomp::matrix_view<A> ov = view_of(out);
    {
      py::gil_scoped_release release;
      named(fn, [&] { moecomp::align::design_matrix<W>(ctx, e, ov); return 0; });
    }
    return std::move(out);
  });
}

py::dict permute_neurons(py::handle w1, py::handle w2, py::handle p, py::handle w3, int threads) {
  constexpr const char* fn = "permute_neurons";
  const tensor_arg w1a(fn, "w1", w1), w2a(fn, "w2", w2), pa(fn, "p", p);
  const std::optional<tensor_arg> w3a = optional_arg(fn, "w3", w3);
  const moecomp::host_context ctx(threads);
  py::dict result;
  on_weight(fn, w1a, "w1", [&](auto tag) -> py::object {
    using W = typename decltype(tag)::type;
    const auto e = expert_matrices<W>(fn, w1a, w2a, w3a, "w2", "w3", "w1");
    const moecomp::vector_view<const index_t> pv = index_vector(fn, pa, "p");
    const auto ps = [](index_t v) { return static_cast<py::ssize_t>(v); };
    py::array o1 = new_weight_array<W>({ps(e.w1.rows()), ps(e.w1.cols())});
    py::array o2 = new_weight_array<W>({ps(e.w2.rows()), ps(e.w2.cols())});
    py::array o3 = new_weight_array<W>({ps(e.w3.rows()), ps(e.w3.cols())});
    moecomp::moe::ffn_expert_mutable_view<W> out;
    out.w1 = moecomp::matrix_view<W>(static_cast<W*>(o1.mutable_data()), e.w1.rows(), e.w1.cols());
    out.w2 = moecomp::matrix_view<W>(static_cast<W*>(o2.mutable_data()), e.w2.rows(), e.w2.cols());
    if (e.gated()) out.w3 = moecomp::matrix_view<W>(static_cast<W*>(o3.mutable_data()), e.w3.rows(), e.w3.cols());
    {
      py::gil_scoped_release release;
      named(fn, [&] { moecomp::align::permute_neurons<W>(ctx, e, pv, out); return 0; });
    }
    result["w1"] = weights_result<W>(o1);
    result["w2"] = weights_result<W>(o2);
    result["w3"] = e.gated() ? weights_result<W>(o3) : py::object(py::none());
    return py::none();
  });
  return result;
}

// ---------------------------------------------------------------------------------------------- sparse

py::tuple prune(py::handle w, std::optional<double> sparsity, std::optional<double> keep, const std::string& scope,
                index_t column_block, index_t n, index_t m, py::handle out, int threads) {
  constexpr const char* fn = "prune";
  const tensor_arg wa(fn, "w", w);
  const moecomp::sparse::prune_params params = prune_params_from(fn, sparsity, keep, scope, column_block, n, m);
  const moecomp::host_context ctx(threads);
  py::object result;
  moecomp::sparse::prune_result r;
  on_weight(fn, wa, "w", [&](auto tag) -> py::object {
    using W = typename decltype(tag)::type;
    const moecomp::matrix_view<const W> wv = wa.matrix<const W>();
    if (out.is_none()) {
      py::array o = new_weight_array<W>({static_cast<py::ssize_t>(wv.rows()), static_cast<py::ssize_t>(wv.cols())});
      const moecomp::matrix_view<W> ov(static_cast<W*>(o.mutable_data()), wv.rows(), wv.cols());
      {
        py::gil_scoped_release release;
        r = named(fn, [&] { return moecomp::sparse::prune_magnitude<W>(ctx, params, wv, ov); });
      }
      result = weights_result<W>(o);
      return py::none();
    }
    const tensor_arg oa(fn, "out", out, true);
    require_same<W>(fn, oa, "out", "w");
    const moecomp::matrix_view<W> ov = oa.matrix<W>();
    {
      py::gil_scoped_release release;
      r = named(fn, [&] { return moecomp::sparse::prune_magnitude<W>(ctx, params, wv, ov); });
    }
    result = py::reinterpret_borrow<py::object>(out);
    return py::none();
  });
  return py::make_tuple(result, r.kept, r.threshold);
}

moecomp::sparse::encode_params encode_params_from(const char* fn, const std::string& format, const std::string& values) {
  moecomp::sparse::encode_params e;
  e.format = named(fn, [&] { return moecomp::sparse::parse_sparse_format(format); });
  e.values = named(fn, [&] { return moecomp::sparse::parse_value_dtype(values); });
  return e;
}

py::tuple encode_residual(py::handle base, py::handle w, py::handle permutation, std::optional<double> sparsity,
                          std::optional<double> keep, const std::string& scope, index_t column_block, index_t n,
                          index_t m, const std::string& format, const std::string& values, int threads) {
  constexpr const char* fn = "encode_residual";
  const tensor_arg ba(fn, "base", base), wa(fn, "w", w);
  const std::optional<tensor_arg> pa = optional_arg(fn, "permutation", permutation);
  moecomp::sparse::residual_params params;
  params.prune = prune_params_from(fn, sparsity, keep, scope, column_block, n, m);
  params.encode = encode_params_from(fn, format, values);
  const moecomp::host_context ctx(threads);
  moecomp::sparse::sparse_matrix r;
  moecomp::sparse::residual_info info;
  on_weight(fn, ba, "base", [&](auto tag) -> py::object {
    using W = typename decltype(tag)::type;
    require_same<W>(fn, wa, "w", "base");
    const moecomp::matrix_view<const W> bv = ba.matrix<const W>(), wv = wa.matrix<const W>();
    const moecomp::vector_view<const index_t> pv = pa ? index_vector(fn, *pa, "permutation")
                                                      : moecomp::vector_view<const index_t>();
    py::gil_scoped_release release;
    info = named(fn, [&] { return moecomp::sparse::encode_residual<W>(ctx, params, bv, wv, pv, r); });
    return py::none();
  });
  py::dict d = prune_info(info.pruned);
  d["format"] = moecomp::sparse::to_string(info.format);
  d["bytes"] = info.bytes;
  d["bits_per_weight"] = info.bits_per_weight;
  d["squared_error"] = info.squared_error;
  return py::make_tuple(bytes_of(moecomp::io::serialize_residual(r.view())), d);
}

py::object decode_residual(py::handle residual, int threads) {
  constexpr const char* fn = "decode_residual";
  const moecomp::io::residual_file f = residual_arg(fn, "residual", residual);
  const moecomp::sparse::sparse_matrix_view& r = f.matrix();
  py::array_t<float> out = new_matrix<float>(r.rows(), r.cols());
  const moecomp::matrix_view<float> ov = view_of(out);
  const moecomp::host_context ctx(threads);
  {
    py::gil_scoped_release release;
    named(fn, [&] { moecomp::sparse::decode_sparse<float>(ctx, r, ov); return 0; });
  }
  return std::move(out);
}

py::object restore_dense(py::handle base, py::handle residual, py::handle permutation, py::handle out, int threads) {
  constexpr const char* fn = "restore_dense";
  const tensor_arg ba(fn, "base", base);
  const moecomp::io::residual_file f = residual_arg(fn, "residual", residual);
  const std::optional<tensor_arg> pa = optional_arg(fn, "permutation", permutation);
  const moecomp::host_context ctx(threads);
  return on_weight(fn, ba, "base", [&](auto tag) -> py::object {
    using W = typename decltype(tag)::type;
    const moecomp::matrix_view<const W> bv = ba.matrix<const W>();
    const moecomp::vector_view<const index_t> pv = pa ? index_vector(fn, *pa, "permutation")
                                                      : moecomp::vector_view<const index_t>();
    if (out.is_none()) {
      py::array o = new_weight_array<W>({static_cast<py::ssize_t>(bv.rows()), static_cast<py::ssize_t>(bv.cols())});
      const moecomp::matrix_view<W> ov(static_cast<W*>(o.mutable_data()), bv.rows(), bv.cols());
      {
        py::gil_scoped_release release;
        named(fn, [&] { moecomp::sparse::restore_dense<W, W>(ctx, bv, f.matrix(), ov, pv); return 0; });
      }
      return weights_result<W>(o);
    }
    const tensor_arg oa(fn, "out", out, true);
    require_same<W>(fn, oa, "out", "base");
    const moecomp::matrix_view<W> ov = oa.matrix<W>();
    {
      py::gil_scoped_release release;
      named(fn, [&] { moecomp::sparse::restore_dense<W, W>(ctx, bv, f.matrix(), ov, pv); return 0; });
    }
    return py::reinterpret_borrow<py::object>(out);
  });
}

py::dict encode_expert_residual(py::handle base_w1, py::handle base_w2, py::handle w1, py::handle w2, py::handle base_w3,
                                py::handle w3, py::handle permutation, std::optional<double> sparsity,
                                std::optional<double> keep, const std::string& scope, index_t column_block, index_t n,
                                index_t m, const std::string& format, const std::string& values, int threads) {
  constexpr const char* fn = "encode_expert_residual";
  const tensor_arg b1(fn, "base_w1", base_w1), b2(fn, "base_w2", base_w2), e1(fn, "w1", w1), e2(fn, "w2", w2);
  const std::optional<tensor_arg> b3 = optional_arg(fn, "base_w3", base_w3), e3 = optional_arg(fn, "w3", w3),
                                  pa = optional_arg(fn, "permutation", permutation);
  moecomp::sparse::residual_params params;
  params.prune = prune_params_from(fn, sparsity, keep, scope, column_block, n, m);
  params.encode = encode_params_from(fn, format, values);
  const moecomp::host_context ctx(threads);
  moecomp::moe::expert_residual r;
  moecomp::moe::expert_residual_info info;
  on_weight(fn, b1, "base_w1", [&](auto tag) -> py::object {
    using W = typename decltype(tag)::type;
    const auto base = expert_matrices<W>(fn, b1, b2, b3, "base_w2", "base_w3", "base_w1");
    require_same<W>(fn, e1, "w1", "base_w1");
    const auto expert = expert_matrices<W>(fn, e1, e2, e3, "w2", "w3", "base_w1");
    const moecomp::vector_view<const index_t> pv = pa ? index_vector(fn, *pa, "permutation")
                                                      : moecomp::vector_view<const index_t>();
    py::gil_scoped_release release;
    info = named(fn, [&] { return moecomp::moe::encode_expert_residual<W>(ctx, params, base, expert, pv, r); });
    return py::none();
  });
  py::dict d = prune_info(info.pruned);
  d["w1"] = bytes_of(moecomp::io::serialize_residual(r.w1.view()));
  d["w3"] = b3 ? py::object(bytes_of(moecomp::io::serialize_residual(r.w3.view()))) : py::object(py::none());
  d["w2"] = bytes_of(moecomp::io::serialize_residual(r.w2.view()));
  d["bytes"] = info.bytes;
  d["bits_per_weight"] = info.bits_per_weight;
  d["squared_error"] = info.squared_error;
  return d;
}

// ---------------------------------------------------------------------------------------------- similarity

py::dict partition_experts(py::handle distances, index_t groups, index_t max_size, const std::string& method,
                           index_t restarts, index_t kicks, std::uint64_t seed, index_t exact_limit,
                           double symmetry_tolerance, int threads) {
  constexpr const char* fn = "partition_experts";
  namespace ms = moecomp::similarity;
  const tensor_arg da(fn, "distances", distances);
  ms::partition_params params;
  params.groups = groups;
  params.max_size = max_size;
  params.method = named(fn, [&] { return ms::parse_partition_method(method); });
  params.restarts = restarts;
  params.kicks = kicks;
  params.seed = seed;
  params.exact_limit = exact_limit;
  params.symmetry_tolerance = symmetry_tolerance;
  const moecomp::host_context ctx(threads);
  py::array_t<std::int64_t> labels;
  ms::partition_result r;
  on_real(fn, da, "distances", [&](auto tag) -> py::object {
    using T = decltype(tag);
    const moecomp::matrix_view<const T> dv = da.matrix<const T>();
    labels = py::array_t<std::int64_t>(static_cast<py::ssize_t>(dv.rows()));
    const moecomp::vector_view<std::int64_t> lv(labels.mutable_data(), dv.rows());
    py::gil_scoped_release release;
    r = named(fn, [&] { return ms::partition_experts<T>(ctx, params, dv, lv); });
    return py::none();
  });
  py::dict d;
  d["labels"] = labels;
  d["objective"] = r.objective;
  d["within"] = r.within;
  d["total"] = r.total;
  d["lower_bound"] = r.lower_bound;
  d["within_lower_bound"] = r.within_lower_bound;
  d["optimal"] = r.optimal;
  d["method"] = ms::to_string(r.method);
  d["best_restart"] = r.best_restart;
  d["iterations"] = r.iterations;
  d["status"] = moecomp::to_string(r.status);
  return d;
}

py::dict cka_matrix(py::handle features, const std::string& kernel, bool debiased, double sigma, double threshold,
                    int threads) {
  constexpr const char* fn = "cka_matrix";
  namespace ms = moecomp::similarity;
  const tensor_arg fa(fn, "features", features);
  ms::cka_params params;
  params.kernel = named(fn, [&] { return ms::parse_cka_kernel(kernel); });
  params.unbiased = debiased;
  params.sigma = sigma;
  params.threshold = threshold;
  const moecomp::host_context ctx(threads);
  py::array_t<double> out;
  ms::cka_matrix_result r;
  on_real(fn, fa, "features", [&](auto tag) -> py::object {
    using T = decltype(tag);
    const moecomp::matrix_stack_view<const T> fv = fa.stack<const T>();
    out = new_matrix<double>(fv.count(), fv.count());
    const moecomp::matrix_view<double> ov = view_of(out);
    py::gil_scoped_release release;
    r = named(fn, [&] { return ms::cka_matrix<T>(ctx, params, fv, ov); });
    return py::none();
  });
  py::dict d;
  d["cka"] = out;
  d["route"] = ms::to_string(r.route);
  d["undefined_pairs"] = r.undefined_pairs;
  d["first_undefined"] = ms::to_string(r.first_undefined);
  return d;
}

// ---------------------------------------------------------------------------------------------- gating, moe

py::dict dispatch_plan(py::handle ids, index_t experts, index_t block_size, index_t capacity, int threads) {
  constexpr const char* fn = "dispatch_plan";
  const tensor_arg ia(fn, "ids", ids);
  if (!ia.holds<std::int64_t>()) throw py::type_error(std::string(fn) + ": ids must be int64, got " + ia.dtype());
  const moecomp::matrix_view<const std::int64_t> iv = ia.matrix<const std::int64_t>();
  moecomp::gating::dispatch_params params;
  params.block_size = block_size;
  params.capacity = capacity;
  const moecomp::host_context ctx(threads);
  moecomp::gating::dispatch_plan plan;
  {
    py::gil_scoped_release release;
    named(fn, [&] { moecomp::gating::make_dispatch_plan(ctx, params, experts, iv, plan); return 0; });
  }
  py::dict d;
  const auto put = [&](const char* key, std::vector<std::int64_t>& v) {
    const auto size = static_cast<py::ssize_t>(v.size());
    d[key] = owned_array<std::int64_t>(std::move(v), {size});
  };
  put("sorted_token_ids", plan.sorted_token_ids);
  put("expert_ids", plan.expert_ids);
  put("counts", plan.counts);
  put("offsets", plan.offsets);
  put("position", plan.position);
  d["num_tokens_post_pad"] = plan.num_tokens_post_pad;
  d["dropped"] = plan.dropped;
  return d;
}

py::object moe_layer_forward(py::handle x, py::handle router, py::handle w1, py::handle w2, py::handle w3,
                             const std::string& rule, index_t top_k, const std::string& scores, bool renormalize,
                             double tau, index_t min_k, index_t max_k, index_t n_group, index_t topk_group,
                             double routed_scaling_factor, py::handle router_bias, py::handle expert_map,
                             py::handle shared_w1, py::handle shared_w3, py::handle shared_w2, py::handle shared_gate,
                             const std::string& activation, const std::string& matmul, int threads) {
  constexpr const char* fn = "moe_layer_forward";
  const tensor_arg xa(fn, "x", x), ra(fn, "router", router), w1a(fn, "w1", w1), w2a(fn, "w2", w2);
  const std::optional<tensor_arg> w3a = optional_arg(fn, "w3", w3), ba = optional_arg(fn, "router_bias", router_bias),
                                  ma = optional_arg(fn, "expert_map", expert_map),
                                  s1 = optional_arg(fn, "shared_w1", shared_w1),
                                  s3 = optional_arg(fn, "shared_w3", shared_w3),
                                  s2 = optional_arg(fn, "shared_w2", shared_w2),
                                  ga = optional_arg(fn, "shared_gate", shared_gate);
  moecomp::moe::moe_layer_params params;
  params.routing = routing_params_from(fn, rule, top_k, scores, renormalize, tau, min_k, max_k, n_group, topk_group,
                                       routed_scaling_factor);
  params.ffn.act = named(fn, [&] { return moecomp::moe::parse_activation(activation); });
  if (s1.has_value() != s2.has_value())
    throw py::value_error(std::string(fn) + ": give both shared_w1 and shared_w2, or neither");
  if (s3 && !s1) throw py::value_error(std::string(fn) + ": shared_w3 needs shared_w1 and shared_w2");
  moecomp::host_context ctx(threads);
  ctx.matmul = named(fn, [&] { return moecomp::parse_matmul_precision(matmul); });
  return on_weight(fn, w1a, "w1", [&](auto tag) -> py::object {
    using W = typename decltype(tag)::type;
    using A = moecomp::accumulator_t<W>;
    const char* why = std::is_same_v<W, A> ? "w1's dtype" : "float32 for 16-bit weights";
    moecomp::moe::moe_layer_view<W> layer;
    layer.experts = expert_stack<W>(fn, w1a, w2a, w3a);
    require_dtype<A>(fn, xa, "x", why);
    require_dtype<A>(fn, ra, "router", why);
    const moecomp::matrix_view<const A> xv = xa.matrix<const A>();
    layer.router = ra.matrix<const A>();
    if (ba) {
      require_dtype<A>(fn, *ba, "router_bias", why);
      layer.router_bias = ba->vector<const A>();
    }
    if (ma) layer.expert_map = index_vector(fn, *ma, "expert_map");
    if (s1) {
      layer.shared = expert_stack<W>(fn, *s1, *s2, s3, "shared_");
    }
    if (ga) {
      require_dtype<A>(fn, *ga, "shared_gate", why);
      const moecomp::vector_view<const A> gv = ga->vector<const A>();
      if (gv.stride() != 1 && gv.size() > 1) ga->fail("must be contiguous");
      layer.shared_gate = moecomp::matrix_view<const A>(gv.data(), 1, gv.size());
    }
    py::array_t<A> y = new_matrix<A>(xv.rows(), xv.cols());
    const moecomp::matrix_view<A> yv = view_of(y);
    {
      py::gil_scoped_release release;
      named(fn, [&] { return moecomp::moe::moe_layer_forward<W>(ctx, params, layer, xv, yv); });
    }
    return std::move(y);
  });
}

// ---------------------------------------------------------------------------------------------- compress

namespace mc = moecomp::compress;
namespace fs = std::filesystem;

/// A path argument: str or os.PathLike.
std::string path_arg(const char* fn, const char* name, py::handle object) {
  try {
    return py::cast<std::string>(py::module_::import("os").attr("fspath")(object));
  } catch (const py::error_already_set&) {
    throw py::type_error(std::string(fn) + ": " + name + " must be a path (str or os.PathLike)");
  } catch (const py::cast_error&) {
    throw py::type_error(std::string(fn) + ": " + name + " must be a path (str or os.PathLike), not bytes");
  }
}

/// A message of compress::resolved_params in the binding's words: "compress: params.experts must ..." becomes
/// "FN: experts must ..." (the keywords are compress_params' field names).
std::string keyword_message(const char* fn, std::string message) {
  const std::string head = "compress: ";
  if (message.compare(0, head.size(), head) == 0) message.erase(0, head.size());
  // params.global is the keyword global_prune (`global` is a Python keyword).
  for (std::size_t at; (at = message.find("params.global")) != std::string::npos;) message.replace(at, 13, "global_prune");
  for (std::size_t at; (at = message.find("params.")) != std::string::npos;) message.erase(at, 7);
  const std::pair<const char*, const char*> keywords[] = {
      {"router.learning_rate", "router_lr"}, {"router.hidden", "router_hidden"}, {"router.epochs", "router_epochs"},
      {"router.steps", "router_steps"},     {"router.batch_size", "router_batch_size"}, {"taus", "tau"}};
  for (const auto& [field, keyword] : keywords)
    for (std::size_t at; (at = message.find(field)) != std::string::npos;) message.replace(at, std::strlen(field), keyword);
  return std::string(fn) + ": " + message;
}

/// moefy's and sadmoe's keywords (compress_layer leaves them at their defaults).
struct dense_keywords {
  index_t expert_size = 0;
  index_t router_hidden = 128;
  bool router_bias = false;
  std::string router_objective = "norm";
  double router_lr = 1e-3;
  index_t router_epochs = 10;
  index_t router_steps = 0;
  index_t router_batch_size = 64;
  py::object tau = py::none();  // a threshold or a sequence of them
  std::string expert_storage = "distinct";  // hc-smoe's expert storage (issue 34); kept here to leave the signature be
};

/// cka-merge's Table 3-4 keywords (issue 34): compress_params' similarity_tokens, augment and merge_router.
struct cka_keywords {
  index_t similarity_tokens = 0;
  index_t augment = 0;
  std::string merge_router = "auto";
  // The other baselines' and ablations' keywords (issue 34): compress_params' align, samples, global, center,
  // residual and rank (`global` is a Python keyword: global_prune).
  std::string align = "none";
  index_t samples = 0;
  bool global_prune = false;
  std::string center = "barycenter";
  std::string residual = "prune";
  index_t rank = 0;
};

/// compress_params from the keywords, "auto" where they are left at their defaults. A keyword that another method
/// uses, given a value other than its default, is refused (the tool refuses the option): ValueError.
mc::compress_params compress_params_from(const char* fn, const std::string& method, index_t experts,
                                         const std::string& features, const std::string& linkage,
                                         const std::optional<std::string>& merge, const std::string& similarity,
                                         const std::string& criterion, std::int64_t seed, double keep,
                                         const std::string& format, const std::optional<std::string>& values,
                                         index_t max_iterations, bool restore_dense, index_t top_k, index_t restarts,
                                         const dense_keywords& dense = {}, const cka_keywords& cka = {}) {
  using m = mc::method;
  mc::compress_params p;
  p.method = named(fn, [&] { return mc::parse_method(method); });
  const struct {
    const char* keyword;
    bool given;
    std::vector<m> methods;
    const char* owners;
  } rules[] = {
      {"features", features != "auto", {m::hc_smoe}, "hc-smoe only"},
      {"linkage", linkage != "average", {m::hc_smoe}, "hc-smoe only"},
      {"merge", merge.has_value(), {m::hc_smoe, m::cka_merge}, "hc-smoe and cka-merge only"},
      {"similarity", similarity != "auto", {m::cka_merge}, "cka-merge only"},
      {"criterion", criterion != "frequency", {m::prune}, "prune only"},
      {"keep", keep != 0.25, {m::resmoe}, "resmoe only"},
      {"format", format != "auto", {m::resmoe}, "resmoe only"},
      {"values", values.has_value(), {m::resmoe}, "resmoe only"},
      {"max_iterations", max_iterations != 0, {m::resmoe, m::moefy, m::sadmoe}, "resmoe, moefy and sadmoe only"},
      {"restore_dense", restore_dense, {m::resmoe}, "resmoe only"},
      {"top_k", top_k != 0, {m::moefy, m::sadmoe}, "moefy and sadmoe only"},
      {"restarts", restarts != 10, {m::moefy, m::sadmoe}, "moefy and sadmoe only"},
      {"expert_size", dense.expert_size != 0, {m::moefy, m::sadmoe}, "moefy and sadmoe only"},
      {"router_hidden", dense.router_hidden != 128, {m::sadmoe}, "sadmoe only"},
      {"router_bias", dense.router_bias, {m::sadmoe}, "sadmoe only"},
      {"router_objective", dense.router_objective != "norm", {m::sadmoe}, "sadmoe only"},
      {"router_lr", dense.router_lr != 1e-3, {m::sadmoe}, "sadmoe only"},
      {"router_epochs", dense.router_epochs != 10, {m::sadmoe}, "sadmoe only"},
      {"router_steps", dense.router_steps != 0, {m::sadmoe}, "sadmoe only"},
      {"router_batch_size", dense.router_batch_size != 64, {m::sadmoe}, "sadmoe only"},
      {"tau", !dense.tau.is_none(), {m::sadmoe}, "sadmoe only"},
      {"expert_storage", dense.expert_storage != "distinct", {m::hc_smoe, m::m_smoe, m::cka_merge},
       "hc-smoe, m-smoe and cka-merge with merge_router map only"},  // issue 34
      {"similarity_tokens", cka.similarity_tokens != 0, {m::cka_merge}, "cka-merge only"},
      {"augment", cka.augment != 0, {m::cka_merge}, "cka-merge only"},
      {"merge_router", cka.merge_router != "auto", {m::cka_merge}, "cka-merge only"},
      {"align", cka.align != "none", {m::hc_smoe, m::cka_merge}, "hc-smoe and cka-merge only"},
      {"samples", cka.samples != 0, {m::prune}, "prune only"},
      {"global_prune", cka.global_prune, {m::prune}, "prune only"},
      {"center", cka.center != "barycenter", {m::resmoe}, "resmoe only"},
      {"residual", cka.residual != "prune", {m::resmoe}, "resmoe only"},
      {"rank", cka.rank != 0, {m::resmoe}, "resmoe only"},
  };
  for (const auto& r : rules)
    if (r.given && std::find(r.methods.begin(), r.methods.end(), p.method) == r.methods.end())
      throw py::value_error(std::string(fn) + ": " + r.keyword + " is for " + r.owners + ", and method is " +
                            mc::to_string(p.method));
  if (experts < 0) throw py::value_error(std::string(fn) + ": experts must be >= 0 (0: the default), got " + std::to_string(experts));
  if (seed < 0) throw py::value_error(std::string(fn) + ": seed must be >= 0, got " + std::to_string(seed));
  if (max_iterations < 0)
    throw py::value_error(std::string(fn) + ": max_iterations must be >= 0 (0: the default), got " + std::to_string(max_iterations));
  if (top_k < 0) throw py::value_error(std::string(fn) + ": top_k must be >= 0 (0: the default), got " + std::to_string(top_k));
  p.experts = experts;
  p.features = named(fn, [&] { return mc::parse_expert_features(features); });
  p.linkage = named(fn, [&] { return moecomp::cluster::parse_linkage_method(linkage); });
  if (merge) p.merge = named(fn, [&] { return moecomp::merge::parse_merge_method(*merge); });
  p.similarity = named(fn, [&] { return mc::parse_expert_similarity(similarity); });
  p.criterion = named(fn, [&] { return mc::parse_prune_criterion(criterion); });
  p.seed = static_cast<std::uint64_t>(seed);
  p.keep = keep;
  p.format = named(fn, [&] { return moecomp::sparse::parse_sparse_format(format); });
  if (values) p.values = named(fn, [&] { return moecomp::sparse::parse_value_dtype(*values); });
  p.max_iterations = max_iterations;
  p.restore_dense = restore_dense;
  p.top_k = top_k;
  p.restarts = restarts;
  if (dense.expert_size != 0 && experts != 0)
    throw py::value_error(std::string(fn) + ": give experts or expert_size, not both");
  if (dense.expert_size < 0 || dense.router_steps < 0)
    throw py::value_error(std::string(fn) + ": expert_size and router_steps must be >= 0 (0: not given)");
  p.expert_size = dense.expert_size;
  p.similarity_tokens = cka.similarity_tokens;  // negative values: resolved_params' ValueError
  p.augment = cka.augment;
  p.merge_router = named(fn, [&] { return moecomp::merge::parse_router_rule(cka.merge_router); });
  p.align = named(fn, [&] { return mc::parse_merge_alignment(cka.align); });
  if (cka.samples < 0 || cka.rank < 0)
    throw py::value_error(std::string(fn) + ": samples and rank must be >= 0 (0: the default), got " +
                          std::to_string(cka.samples) + " and " + std::to_string(cka.rank));
  p.samples = cka.samples;
  p.global = cka.global_prune;
  p.center = named(fn, [&] { return mc::parse_resmoe_center(cka.center); });
  p.residual = named(fn, [&] { return mc::parse_resmoe_residual(cka.residual); });
  p.rank = cka.rank;
  p.router.hidden = dense.router_hidden;
  p.router.bias = dense.router_bias;
  p.router.objective = named(fn, [&] { return moecomp::gating::parse_router_objective(dense.router_objective); });
  p.router.learning_rate = dense.router_lr;
  p.router.epochs = dense.router_epochs;
  p.router.steps = dense.router_steps;
  p.router.batch_size = dense.router_batch_size;
  p.router.seed = p.seed;
  p.expert_storage = named(fn, [&] { return mc::parse_expert_storage(dense.expert_storage); });  // issue 34
  if (!dense.tau.is_none()) {  // one threshold or several: the report measures each, config.json gets the first
    p.taus.clear();
    if (PyNumber_Check(dense.tau.ptr()) != 0) {
      p.taus.push_back(py::cast<double>(dense.tau));
    } else {
      for (const py::handle v : dense.tau) p.taus.push_back(py::cast<double>(v));
    }
    for (const double v : p.taus)
      if (!(v >= 0 && v <= 1))
        throw py::value_error(std::string(fn) + ": tau: expected thresholds in [0, 1], got " + std::to_string(v));
    if (p.taus.empty()) throw py::value_error(std::string(fn) + ": tau: expected at least one threshold");
    p.tau = p.taus.front();
  }
  return p;
}

/// resolved_params / resolved_dense_params with their messages in the binding's words.
template <class F>
mc::compress_params resolved(const char* fn, F resolve) {
  try {
    return resolve();
  } catch (const moecomp::invalid_argument& e) {
    throw py::value_error(keyword_message(fn, e.what()));
  }
}

/// `path` absolute with its links, "." and ".." resolved as far as it exists.
fs::path resolved_path(const std::string& path) {
  std::error_code ec;
  const fs::path absolute = fs::absolute(path, ec);
  if (ec) return fs::path(path).lexically_normal();
  const fs::path canonical = fs::weakly_canonical(absolute, ec);
  return ec ? absolute.lexically_normal() : canonical;
}

/// Whether `inner` lies strictly inside the directory `outer` (both resolved).
bool lies_inside(const fs::path& inner, const fs::path& outer) {
  auto i = inner.begin(), o = outer.begin();
  for (; o != outer.end(); ++o, ++i) {
    if (o->empty()) continue;
    if (i == inner.end() || *i != *o) return false;
  }
  for (; i != inner.end(); ++i)
    if (!i->empty()) return true;
  return false;
}

bool same_file(const fs::path& a, const fs::path& b) {
  std::error_code ec;
  return a == b || fs::equivalent(a, b, ec);
}

/// 16 hex digits no other run is likely to pick.
std::string unique_suffix() {
  std::random_device device;
  std::uint64_t z = (static_cast<std::uint64_t>(device()) << 32) ^ static_cast<std::uint64_t>(device()) ^
                    static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(z ^ (z >> 31)));
  return hex;
}

/// OUT_DIR's staging directory, `OUT_DIR.moecomp-tmp-<16 hex>` beside it, as the tool makes it (docs/cli.md,
/// "Outputs"): locked (flock) while this run lives, so that the next run (the tool's or this module's) sweeps
/// it only after a kill; removed whole unless committed, which renames it into place (an existing OUT_DIR is
/// moved aside, replaced, then removed).
class staging_directory {
 public:
  explicit staging_directory(const std::string& target) : target_(target) {
    sweep_stale();
    for (int attempt = 0; attempt < 16; ++attempt) {
      const std::string candidate = target_ + moecomp::io::temporary_file_marker + unique_suffix();
      if (::mkdir(candidate.c_str(), 0777) == 0) {
        path_ = candidate;
        lock_ = ::open(candidate.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (lock_ >= 0) ::flock(lock_, LOCK_EX | LOCK_NB);
        return;
      }
      if (errno != EEXIST)
        throw moecomp::io_error("compress_checkpoint: cannot create the staging directory '" + candidate +
                                "': " + std::strerror(errno));
    }
    throw moecomp::io_error("compress_checkpoint: cannot create a staging directory beside '" + target_ + "'");
  }
  /// A directory the caller made and the parts wrote into (compress_checkpoint's finish): removed whole unless
  /// committed, renamed into place by commit().
  staging_directory(const std::string& target, const std::string& existing) : target_(target), path_(existing) {}
  ~staging_directory() {
    if (!path_.empty()) {
      std::error_code ignored;
      fs::remove_all(path_, ignored);
    }
    if (lock_ >= 0) ::close(lock_);
  }
  staging_directory(const staging_directory&) = delete;
  staging_directory& operator=(const staging_directory&) = delete;

  const std::string& path() const noexcept { return path_; }

  void commit() {
    std::error_code ec;
    std::string old;
    if (fs::exists(fs::symlink_status(target_, ec))) {
      old = target_ + ".moecomp-old-" + unique_suffix();
      fs::rename(target_, old, ec);
      if (ec) throw moecomp::io_error("compress_checkpoint: cannot replace the directory '" + target_ + "': " + ec.message());
    }
    fs::rename(path_, target_, ec);
    if (ec) {
      std::error_code restore;
      if (!old.empty()) fs::rename(old, target_, restore);
      throw moecomp::io_error("compress_checkpoint: cannot rename '" + path_ + "' to '" + target_ + "': " + ec.message());
    }
    path_.clear();
    if (lock_ >= 0) ::close(lock_);
    lock_ = -1;
    if (!old.empty()) fs::remove_all(old, ec);
  }

 private:
  /// Staging directories of killed runs: `TARGET.moecomp-tmp-<16 hex>` whose lock no process holds.
  void sweep_stale() {
    fs::path parent = fs::path(target_).parent_path();
    if (parent.empty()) parent = ".";
    const std::string prefix = fs::path(target_).filename().string() + moecomp::io::temporary_file_marker;
    std::error_code ec;
    std::vector<fs::path> stale;
    for (fs::directory_iterator it(parent, ec), end; !ec && it != end; it.increment(ec)) {
      const std::string name = it->path().filename().string();
      if (name.size() != prefix.size() + 16 || name.compare(0, prefix.size(), prefix) != 0) continue;
      if (name.find_first_not_of("0123456789abcdef", prefix.size()) != std::string::npos) continue;
      const int fd = ::open(it->path().c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (fd < 0) continue;
      if (::flock(fd, LOCK_EX | LOCK_NB) == 0) stale.push_back(it->path());
      ::close(fd);
    }
    for (const fs::path& p : stale) fs::remove_all(p, ec);
  }

  std::string target_, path_;
  int lock_ = -1;
};

/// The model directory's other files (tokenizer, generation config), copied unchanged into `dir`, as the tool's
/// compress does: every regular file but config.json, *.safetensors, model.safetensors.index.json and dotfiles.
void copy_other_files(const std::string& model_dir, const std::string& dir) {
  for (const auto& entry : fs::directory_iterator(model_dir)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_regular_file() || name == "config.json" || entry.path().extension() == ".safetensors" ||
        name == "model.safetensors.index.json" || name.rfind('.', 0) == 0)
      continue;
    fs::copy_file(entry.path(), fs::path(dir) / name);
  }
}

void write_text(const std::string& dir, const std::string& name, const std::string& text) {
  std::ofstream f(fs::path(dir) / name, std::ios::binary);
  f << text;
  f.close();
  if (!f) throw moecomp::io_error("compress_checkpoint: cannot write " + name + " into '" + dir + "'");
}

double peak_rss_bytes() {
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) * 1024.0;
}

/// What a finished run leaves beside its shards in `dir`, as the tool writes it: config.json and the model
/// directory's other files (and the same in `dense_dir` when given), then compression_report.json. Returns the
/// report's text.
std::string write_run_files(const std::string& dir, const std::string* dense_dir, const std::string& model_dir,
                            const mc::checkpoint_report& report, const std::string& calibration_path,
                            std::chrono::steady_clock::time_point started) {
  write_text(dir, "config.json", report.config_json);
  copy_other_files(model_dir, dir);
  if (dense_dir != nullptr) {
    write_text(*dense_dir, "config.json", report.dense_config_json);
    copy_other_files(model_dir, *dense_dir);
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  const std::string text = mc::report_json(report, model_dir, calibration_path, seconds, peak_rss_bytes()).dump(2) + "\n";
  write_text(dir, "compression_report.json", text);
  return text;
}

/// A run (or part) that did not end ok: RuntimeError saying why (a layer's non-finite error, or stopped).
void throw_unless_ok(const char* fn, const mc::checkpoint_report& report, bool moe) {
  if (report.status == moecomp::status::numerical_error)
    throw std::runtime_error(std::string(fn) + ": " + (moe ? "MoE layer " : "FFN ") + report.failed_layer +
                             ": the compressed layer's output error on the calibration tokens is " +
                             (std::isnan(report.criterion) ? "nan" : "inf") +
                             " (numerical failure, status numerical_error), nothing was written");
  if (report.status != moecomp::status::ok)
    throw std::runtime_error(std::string(fn) + ": the run stopped (status " + moecomp::to_string(report.status) +
                             "), nothing was written");
}

/// `run()` with a calibration file's defect, found when its layer comes, said as the calibration argument's
/// (ValueError naming it) rather than a checkpoint's.
template <class Run>
auto naming_calibration(const char* fn, Run&& run) {
  try {
    return run();
  } catch (const moecomp::io_error& e) {
    const std::string what = e.what();
    if (what.find("read_calibration_tokens") != std::string::npos)
      throw moecomp::invalid_argument(std::string(fn) + ": calibration: " + what);
    throw;
  }
}

/// The checkpoint layouts: every *.json of `directory` (read_checkpoint_layouts), or by default the source tree's
/// layouts/ this module was built from (MOECOMP_SOURCE_LAYOUTS_DIR), each named "layouts/NAME" as the tool names
/// its built-in copies.
std::vector<moecomp::model::checkpoint_layout> layouts_from(const char* fn, const std::optional<std::string>& directory) {
  namespace mm = moecomp::model;
  try {
    if (directory) return mm::read_checkpoint_layouts(*directory);
    const std::string dir = MOECOMP_SOURCE_LAYOUTS_DIR;
    std::error_code ec;
    if (!fs::is_directory(dir, ec))
      throw py::value_error(std::string(fn) + ": the built-in layouts directory '" + dir +
                            "' (the source tree this module was built from) is gone: pass layouts=DIR");
    std::vector<std::string> files;
    for (const auto& entry : fs::directory_iterator(dir, ec))
      if (entry.path().extension() == ".json") files.push_back(entry.path().string());
    std::sort(files.begin(), files.end());
    std::vector<mm::checkpoint_layout> layouts;
    for (const std::string& f : files)
      layouts.push_back(mm::parse_checkpoint_layout(mm::read_text_file(f), "layouts/" + fs::path(f).filename().string()));
    return layouts;
  } catch (const moecomp::error& e) {
    throw py::value_error(std::string(fn) + ": layouts: " + e.what());
  }
}

/// The observer of a run with the GIL released: each step calls progress(layer, layers, name, step) with the GIL
/// and checks for signals (KeyboardInterrupt); stop() says whether either raised. The exception is kept and
/// raised by the caller once the library has stopped (its shards removed).
struct python_observer {
  py::object progress;
  std::optional<py::error_already_set> error;
  std::atomic<bool> failed{false};

  mc::compress_observer observer() {
    mc::compress_observer o;
    o.step = [this](index_t layer, index_t layers, const std::string& name, const std::string& step) {
      if (failed) return;
      py::gil_scoped_acquire gil;
      try {
        if (!progress.is_none()) progress(layer, layers, name, step);
        if (PyErr_CheckSignals() != 0) throw py::error_already_set();
      } catch (py::error_already_set& e) {
        error.emplace(std::move(e));
        failed = true;
      }
    };
    o.stop = [this] {
      if (failed) return true;
      py::gil_scoped_acquire gil;
      if (PyErr_CheckSignals() != 0) {
        error.emplace();
        failed = true;
      }
      return failed.load();
    };
    return o;
  }
};

/// moecomp.assign_layers: the checkpoint's MoE layers spread over `parts` by bytes.
std::vector<std::vector<index_t>> assign_layers_of(py::handle model_dir_arg, index_t parts, py::handle layouts_arg) {
  constexpr const char* fn = "assign_layers";
  namespace mm = moecomp::model;
  const std::string model_dir = path_arg(fn, "model_dir", model_dir_arg);
  if (parts < 1) throw py::value_error(std::string(fn) + ": parts must be >= 1, got " + std::to_string(parts));
  const std::optional<std::string> layouts_dir =
      layouts_arg.is_none() ? std::nullopt : std::optional<std::string>(path_arg(fn, "layouts", layouts_arg));
  const std::vector<mm::checkpoint_layout> layouts = layouts_from(fn, layouts_dir);
  const std::string config_path = (fs::path(model_dir) / "config.json").string();
  const std::string config_text = named(fn, [&] { return mm::read_text_file(config_path); });
  const moecomp::io::safetensors_checkpoint checkpoint = moecomp::io::open_safetensors_checkpoint(model_dir);
  const mm::moe_model m = named(fn, [&] { return mm::describe_moe_model(layouts, config_text, checkpoint, config_path); });
  return mc::assign_layers(mc::layer_bytes(checkpoint, m), parts);
}

py::object compress_checkpoint(py::handle model_dir_arg, py::handle out_dir_arg, const std::string& method,
                               index_t experts, py::handle calibration_arg, const std::string& features,
                               const std::string& linkage, const std::optional<std::string>& merge,
                               const std::string& similarity, const std::string& criterion, std::int64_t seed,
                               double keep, const std::string& format, const std::optional<std::string>& values,
                               index_t max_iterations, bool restore_dense, index_t top_k, index_t restarts,
                               index_t expert_size, index_t router_hidden, bool router_bias,
                               const std::string& router_objective, double router_lr, index_t router_epochs,
                               index_t router_steps, index_t router_batch_size, py::object tau,
                               index_t similarity_tokens, index_t augment, const std::string& merge_router,
                               const std::string& align, index_t samples, bool global_prune, const std::string& center,
                               const std::string& residual, index_t rank,
                               py::handle layouts_arg, py::handle progress, int threads, const std::string& expert_storage,
                               const std::optional<std::vector<index_t>>& layers, py::handle work_dir_arg,
                               py::handle layer_reports) {
  constexpr const char* fn = "compress_checkpoint";
  namespace io = moecomp::io;
  namespace mm = moecomp::model;
  const auto started = std::chrono::steady_clock::now();
  const std::string model_dir = path_arg(fn, "model_dir", model_dir_arg);
  std::string out_dir = path_arg(fn, "out_dir", out_dir_arg);
  dense_keywords dense_options;
  dense_options.expert_size = expert_size;
  dense_options.router_hidden = router_hidden;
  dense_options.router_bias = router_bias;
  dense_options.router_objective = router_objective;
  dense_options.router_lr = router_lr;
  dense_options.router_epochs = router_epochs;
  dense_options.router_steps = router_steps;
  dense_options.router_batch_size = router_batch_size;
  dense_options.tau = std::move(tau);
  dense_options.expert_storage = expert_storage;
  const cka_keywords cka_options{similarity_tokens, augment, merge_router, align, samples, global_prune, center, residual, rank};
  mc::compress_params params = compress_params_from(fn, method, experts, features, linkage, merge, similarity,
                                                    criterion, seed, keep, format, values, max_iterations,
                                                    restore_dense, top_k, restarts, dense_options, cka_options);
  if (!progress.is_none() && !PyCallable_Check(progress.ptr()))
    throw py::type_error(std::string(fn) + ": progress must be callable (layer, layers, name, step), or None");

  // The model: config.json, the layouts.
  std::error_code ec;
  if (!fs::is_directory(model_dir, ec))
    throw py::value_error(std::string(fn) + ": model_dir '" + model_dir + "' is not a directory");
  const std::string config_path = (fs::path(model_dir) / "config.json").string();
  if (!fs::exists(fs::symlink_status(config_path, ec)))
    throw py::value_error(std::string(fn) + ": '" + model_dir + "' has no config.json");
  const std::optional<std::string> layouts_dir =
      layouts_arg.is_none() ? std::nullopt : std::optional<std::string>(path_arg(fn, "layouts", layouts_arg));
  const std::vector<mm::checkpoint_layout> layouts = layouts_from(fn, layouts_dir);

  // The calibration tokens: the given file, else MODEL_DIR/calibration.safetensors when it exists.
  std::string calibration_path;
  if (!calibration_arg.is_none()) {
    calibration_path = path_arg(fn, "calibration", calibration_arg);
    if (calibration_path.empty()) throw py::value_error(std::string(fn) + ": calibration: expected a .safetensors file name, got ''");
    const fs::file_status status = fs::status(calibration_path, ec);
    if (!fs::exists(status)) throw py::value_error(std::string(fn) + ": calibration: no file '" + calibration_path + "'");
    if (!fs::is_regular_file(status))
      throw py::value_error(std::string(fn) + ": calibration: '" + calibration_path + "' is " +
                            io::file_kind_text(status.type()) + ", not a regular file");
  } else {
    const std::string fallback = (fs::path(model_dir) / "calibration.safetensors").string();
    if (fs::exists(fs::symlink_status(fallback, ec))) {
      const fs::file_status status = fs::status(fallback, ec);
      if (!fs::is_regular_file(status))
        throw py::value_error(std::string(fn) + ": '" + fallback + "' is " +
                              (fs::exists(status) ? io::file_kind_text(status.type()) : "a link to nothing") +
                              ", not a regular file of calibration tokens (remove it, or pass calibration=FILE)");
      calibration_path = fallback;
    }
  }

  // OUT_DIR: a directory to create or replace whole, beside no input and holding none.
  while (out_dir.size() > 1 && out_dir.back() == '/') out_dir.pop_back();
  {
    const fs::path normal = fs::path(out_dir).lexically_normal();
    const std::string last = normal.filename().string();
    if (out_dir.empty() || last.empty() || last == "." || last == "..")
      throw py::value_error(std::string(fn) + ": out_dir: expected the name of a directory to create or replace, got '" +
                            out_dir + "' (it is replaced whole: name a new one)");
    const fs::file_status status = fs::status(out_dir, ec);
    if (fs::exists(status) && !fs::is_directory(status))
      throw py::value_error(std::string(fn) + ": out_dir '" + out_dir + "' is " + io::file_kind_text(status.type()) +
                            ", not a directory");
    fs::path parent = normal.parent_path();
    if (parent.empty()) parent = ".";
    if (!fs::is_directory(fs::status(parent, ec)))
      throw py::value_error(std::string(fn) + ": out_dir: cannot write '" + out_dir + "': directory '" + parent.string() +
                            "' does not exist");
    if (::access(parent.c_str(), W_OK | X_OK) != 0)
      throw py::value_error(std::string(fn) + ": out_dir: cannot write '" + out_dir + "': directory '" + parent.string() +
                            "' is not writable");
    out_dir = normal.string();
    const fs::path output = resolved_path(out_dir);
    std::vector<std::pair<std::string, std::string>> inputs = {{model_dir, "model_dir"}};
    if (!calibration_path.empty()) inputs.emplace_back(calibration_path, "calibration");
    if (layouts_dir) inputs.emplace_back(*layouts_dir, "layouts");
    for (const auto& [path, what] : inputs) {
      const fs::path input = resolved_path(path);
      const std::string text = what + " '" + path + "'";
      if (same_file(output, input))
        throw py::value_error(std::string(fn) + ": out_dir '" + out_dir + "' is the " + text +
                              "; outputs never replace an input: write to a new directory");
      if (fs::is_directory(fs::status(input, ec)) && lies_inside(output, input))
        throw py::value_error(std::string(fn) + ": out_dir '" + out_dir + "' lies inside the " + text +
                              "; outputs never go into an input directory: write it elsewhere");
      if (lies_inside(input, output))
        throw py::value_error(std::string(fn) + ": out_dir '" + out_dir + "' holds the " + text +
                              ", and it is replaced whole; write to a directory that holds no input");
    }
  }

  // The checkpoint, its kind, the parameters resolved for it.
  const std::string config_text = named(fn, [&] { return mm::read_text_file(config_path); });
  const io::safetensors_checkpoint checkpoint = io::open_safetensors_checkpoint(model_dir);
  std::string model_type;
  const mm::model_kind kind = mm::kind_of_model(layouts, config_text, &model_type);
  const bool splits_dense = mc::splits_dense(params.method);
  if (splits_dense && kind == mm::model_kind::moe)
    throw py::value_error(std::string(fn) + ": method " + mc::to_string(params.method) +
                          " splits dense checkpoints, and '" + model_dir +
                          "' is an MoE model (model_type '" + model_type + "'): use hc-smoe, cka-merge, m-smoe, resmoe or prune");
  if (!splits_dense && kind == mm::model_kind::dense)
    throw py::value_error(std::string(fn) + ": method " + mc::to_string(params.method) + " compresses MoE checkpoints, and '" +
                          model_dir + "' is a dense model (model_type '" + model_type +
                          "'): method moefy or sadmoe splits its FFNs into experts");
  std::optional<mm::moe_model> moe;
  std::optional<mm::dense_model> dense;
  if (splits_dense) {
    dense.emplace(named(fn, [&] { return mm::describe_dense_model(layouts, config_text, checkpoint, config_path); }));
    params = resolved(fn, [&] { return mc::resolved_dense_params(params, *dense, !calibration_path.empty()); });
  } else {
    moe.emplace(named(fn, [&] { return mm::describe_moe_model(layouts, config_text, checkpoint, config_path); }));
    if (moe->layers.empty())
      throw py::value_error(std::string(fn) + ": '" + model_dir + "' has no MoE layer under its layout (" + moe->family + ")");
    params = resolved(fn, [&] {
      return mc::resolved_params(params, *moe, !calibration_path.empty(), mc::expert_dtype_of(checkpoint, *moe));
    });
  }
  std::optional<io::safetensors_file> calibration;
  if (!calibration_path.empty()) {
    try {
      calibration.emplace(io::read_safetensors(calibration_path));
    } catch (const moecomp::io_error& e) {
      throw py::value_error(std::string(fn) + ": calibration: " + e.what());
    }
  }
  const moecomp::host_context ctx(threads);

  // One checkpoint from several processes (docs/python.md): a part compresses `layers` into work_dir and leaves
  // its shards there; the finish adopts every part's shards and commits work_dir as out_dir.
  const bool finishing = !layer_reports.is_none();
  if (layers || finishing) {
    if (!moe)
      throw py::value_error(std::string(fn) + ": layers and layer_reports are for MoE checkpoints; method " +
                            mc::to_string(params.method) + " runs in one call");
    if (work_dir_arg.is_none())
      throw py::value_error(std::string(fn) + ": layers and layer_reports need work_dir, the directory every part writes into");
    const std::string work_dir = path_arg(fn, "work_dir", work_dir_arg);
    if (!fs::is_directory(fs::status(work_dir, ec)))
      throw py::value_error(std::string(fn) + ": work_dir '" + work_dir + "' is not an existing directory");
    const std::string dense_dir = (fs::path(work_dir) / "dense").string();
    if (params.restore_dense) fs::create_directories(dense_dir, ec);
    const mm::checkpoint_layout& layout = mc::layout_of(layouts, *moe);
    if (!finishing) {
      const index_t L = static_cast<index_t>(moe->layers.size());
      for (std::size_t k = 0; k < layers->size(); ++k)
        if ((*layers)[k] < 0 || (*layers)[k] >= L || (k > 0 && (*layers)[k] <= (*layers)[k - 1]))
          throw py::value_error(std::string(fn) + ": layers must be ascending distinct layer indices in [0, " +
                                std::to_string(L) + "), got " + std::to_string((*layers)[k]) + " at position " +
                                std::to_string(k));
      python_observer watcher;
      watcher.progress = py::reinterpret_borrow<py::object>(progress);
      const mc::compress_observer observer = watcher.observer();
      mc::checkpoint_report part;
      {
        py::gil_scoped_release release;
        io::safetensors_sharded_writer writer(work_dir, "model");
        std::optional<io::safetensors_sharded_writer> dense_writer;
        if (params.restore_dense) dense_writer.emplace(dense_dir, "model");
        part = naming_calibration(fn, [&] {
          return mc::compress_checkpoint_layers(ctx, params, checkpoint, *moe, calibration ? &*calibration : nullptr,
                                                *layers, writer, dense_writer ? &*dense_writer : nullptr, observer);
        });
        if (!watcher.failed && part.status == moecomp::status::ok) {  // the shards stay for the finish
          writer.release();
          if (dense_writer) dense_writer->release();
        }
      }
      if (watcher.error) throw *watcher.error;
      throw_unless_ok(fn, part, true);
      nlohmann::ordered_json records = nlohmann::ordered_json::array();
      for (std::size_t k = 0; k < layers->size(); ++k)
        records.push_back({{"index", (*layers)[k]}, {"report", mc::layer_report_json(part.layers[k])}});
      nlohmann::ordered_json out;
      out["layers"] = records;
      return py::module_::import("json").attr("loads")(out.dump());
    }
    // The finish: every layer's record once, from the parts' "layers" lists.
    if (layers) throw py::value_error(std::string(fn) + ": layer_reports finishes the run: give layers to the parts, not to it");
    const std::string text = py::cast<std::string>(py::module_::import("json").attr("dumps")(layer_reports));
    std::vector<std::optional<mc::layer_report>> by_layer(moe->layers.size());
    try {
      const nlohmann::ordered_json records = nlohmann::ordered_json::parse(text);
      if (!records.is_array()) throw py::value_error(std::string(fn) + ": layer_reports must be a list of the parts' \"layers\" records");
      for (const auto& record : records) {
        if (!record.is_object() || !record.contains("index") || !record["index"].is_number_integer() || !record.contains("report"))
          throw py::value_error(std::string(fn) + ": layer_reports: each record must be {\"index\": i, \"report\": {...}} as a part returns it");
        const auto i = record["index"].get<std::int64_t>();
        if (i < 0 || i >= static_cast<std::int64_t>(by_layer.size()) || by_layer[static_cast<std::size_t>(i)])
          throw py::value_error(std::string(fn) + ": layer_reports: layer " + std::to_string(i) +
                                " is outside the model's " + std::to_string(by_layer.size()) + " MoE layers or given twice");
        by_layer[static_cast<std::size_t>(i)] = mc::parse_layer_report(record["report"]);
      }
    } catch (const nlohmann::json::exception& e) {
      throw py::value_error(std::string(fn) + ": layer_reports: " + e.what());
    }
    std::vector<mc::layer_report> every;
    for (std::size_t i = 0; i < by_layer.size(); ++i) {
      if (!by_layer[i])
        throw py::value_error(std::string(fn) + ": layer_reports has no record of layer " + std::to_string(i) +
                              " (every part's \"layers\" together, each layer once)");
      every.push_back(std::move(*by_layer[i]));
    }
    staging_directory staging(out_dir, work_dir);
    mc::checkpoint_report report;
    std::string report_text;
    {
      py::gil_scoped_release release;
      io::safetensors_sharded_writer writer(work_dir, "model");
      std::optional<io::safetensors_sharded_writer> dense_writer;
      if (params.restore_dense) dense_writer.emplace(dense_dir, "model");
      report = mc::finish_checkpoint(ctx, params, checkpoint, *moe, layout, config_text, std::move(every), writer,
                                     dense_writer ? &*dense_writer : nullptr);
      report_text = write_run_files(work_dir, dense_writer ? &dense_dir : nullptr, model_dir, report, calibration_path,
                                    started);
    }
    staging.commit();
    return py::module_::import("json").attr("loads")(report_text);
  }
  if (!work_dir_arg.is_none())
    throw py::value_error(std::string(fn) + ": work_dir is for a run in parts (layers, layer_reports)");

  // The run, into the staging directory beside OUT_DIR.
  staging_directory staging(out_dir);
  python_observer watcher;
  watcher.progress = py::reinterpret_borrow<py::object>(progress);
  const mc::compress_observer observer = watcher.observer();
  const std::string dense_dir = (fs::path(staging.path()) / "dense").string();
  mc::checkpoint_report report;
  std::string report_text;
  {
    py::gil_scoped_release release;
    io::safetensors_sharded_writer writer(staging.path(), "model");
    std::optional<io::safetensors_sharded_writer> dense_writer;
    if (params.restore_dense) {
      fs::create_directory(dense_dir);
      dense_writer.emplace(dense_dir, "model");
    }
    report = naming_calibration(fn, [&] {
      return moe ? mc::compress_checkpoint(ctx, params, checkpoint, *moe, mc::layout_of(layouts, *moe), config_text,
                                           calibration ? &*calibration : nullptr, writer,
                                           dense_writer ? &*dense_writer : nullptr, observer)
                 : mc::compress_dense_checkpoint(ctx, params, checkpoint, *dense, config_text,
                                                 calibration ? &*calibration : nullptr, writer, observer);
    });
    if (!watcher.failed && report.status == moecomp::status::ok)
      report_text = write_run_files(staging.path(), dense_writer ? &dense_dir : nullptr, model_dir, report,
                                    calibration_path, started);
  }
  if (watcher.error) throw *watcher.error;  // KeyboardInterrupt, or what the progress callback raised
  throw_unless_ok(fn, report, moe.has_value());
  staging.commit();
  return py::module_::import("json").attr("loads")(report_text);
}

/// compress_layer's model: the routing and FFN of the layer, from a dict with top_k, activation, scoring,
/// normalize_top_k, topk_method, n_group, topk_group and routed_scaling_factor (each optional).
moecomp::model::moe_model layer_model(const char* fn, const py::dict& model) {
  moecomp::model::moe_model m;
  m.family = "python";
  m.model_type = "python";
  m.top_k = 2;
  m.activation = moecomp::moe::activation::silu;
  m.scoring = "softmax";
  m.normalize_top_k = true;
  for (const auto& item : model) {
    const std::string key = py::cast<std::string>(py::str(item.first));
    const py::handle value = item.second;
    try {
      if (key == "top_k") m.top_k = py::cast<index_t>(value);
      else if (key == "activation")
        m.activation = named(fn, [&] { return moecomp::moe::parse_activation(py::cast<std::string>(value)); });
      else if (key == "scoring") m.scoring = py::cast<std::string>(value);
      else if (key == "normalize_top_k") m.normalize_top_k = py::cast<bool>(value);
      else if (key == "topk_method") m.topk_method = py::cast<std::string>(value);
      else if (key == "n_group") m.n_group = py::cast<index_t>(value);
      else if (key == "topk_group") m.topk_group = py::cast<index_t>(value);
      else if (key == "routed_scaling_factor") m.routed_scaling_factor = py::cast<double>(value);
      else
        throw py::value_error(std::string(fn) + ": model: unknown key '" + key +
                              "' (expected top_k, activation, scoring, normalize_top_k, topk_method, n_group, "
                              "topk_group, routed_scaling_factor)");
    } catch (const py::cast_error&) {
      throw py::type_error(std::string(fn) + ": model: '" + key + "' has the wrong type");
    }
  }
  if (m.scoring != "softmax" && m.scoring != "sigmoid")
    throw py::value_error(std::string(fn) + ": model: scoring must be softmax or sigmoid, got '" + m.scoring + "'");
  if (m.topk_method != "greedy" && m.topk_method != "group_limited_greedy" && m.topk_method != "noaux_tc")
    throw py::value_error(std::string(fn) + ": model: topk_method must be greedy, group_limited_greedy or noaux_tc, got '" +
                          m.topk_method + "'");
  return m;
}

/// The dtype compress_layer rounds its results to (the checkpoint's, in compress_checkpoint).
moecomp::io::safetensors_dtype storage_dtype(const char* fn, const std::string& storage) {
  if (storage == "float32") return moecomp::io::safetensors_dtype::f32;
  if (storage == "bfloat16") return moecomp::io::safetensors_dtype::bf16;
  if (storage == "float16") return moecomp::io::safetensors_dtype::f16;
  if (storage == "float64") return moecomp::io::safetensors_dtype::f64;
  throw py::value_error(std::string(fn) + ": storage: expected float32, bfloat16, float16 or float64, got '" + storage + "'");
}

py::dict compress_layer(py::handle w1, py::handle w2, py::handle router, py::handle x, py::handle w3,
                        const std::string& method, index_t experts, const std::string& features,
                        const std::string& linkage, const std::optional<std::string>& merge,
                        const std::string& similarity, const std::string& criterion, std::int64_t seed, double keep,
                        const std::string& format, const std::optional<std::string>& values, index_t max_iterations,
                        py::handle router_bias, py::handle correction_bias, py::handle shared_w1, py::handle shared_w3,
                        py::handle shared_w2, py::handle shared_gate, const py::dict& model, const std::string& storage,
                        index_t similarity_tokens, index_t augment, const std::string& merge_router,
                               const std::string& align, index_t samples, bool global_prune, const std::string& center,
                               const std::string& residual, index_t rank, int threads) {
  constexpr const char* fn = "compress_layer";
  const tensor_arg w1a(fn, "w1", w1), w2a(fn, "w2", w2), ra(fn, "router", router);
  const std::optional<tensor_arg> xa = optional_arg(fn, "x", x), w3a = optional_arg(fn, "w3", w3),
                                  rba = optional_arg(fn, "router_bias", router_bias),
                                  cba = optional_arg(fn, "correction_bias", correction_bias),
                                  s1 = optional_arg(fn, "shared_w1", shared_w1), s3 = optional_arg(fn, "shared_w3", shared_w3),
                                  s2 = optional_arg(fn, "shared_w2", shared_w2),
                                  sga = optional_arg(fn, "shared_gate", shared_gate);
  const auto float32 = [&](const tensor_arg& a, const char* name) {
    if (!a.holds<float>())
      throw py::type_error(std::string(fn) + ": " + name + " must be float32 (compress computes in float32), got " +
                           a.dtype());
  };
  float32(w1a, "w1");
  float32(w2a, "w2");
  float32(ra, "router");
  for (const auto* a : {&xa, &w3a, &rba, &cba, &s1, &s3, &s2, &sga})
    if (*a) float32(**a, "every tensor");
  if (s1.has_value() != s2.has_value())
    throw py::value_error(std::string(fn) + ": give both shared_w1 and shared_w2, or neither");
  if ((s3 || sga) && !s1) throw py::value_error(std::string(fn) + ": shared_w3 and shared_gate need shared_w1 and shared_w2");
  mc::moe_layer_weights_view w;
  w.experts = expert_stack<float>(fn, w1a, w2a, w3a);
  w.router = ra.matrix<const float>();
  if (rba) w.router_bias = rba->vector<const float>();
  if (cba) w.correction_bias = cba->vector<const float>();
  if (s1) {
    w.shared.w1 = s1->matrix<const float>();
    w.shared.w2 = s2->matrix<const float>();
    if (s3) w.shared.w3 = s3->matrix<const float>();
  }
  if (sga) w.shared_gate = sga->vector<const float>();
  moecomp::model::moe_model m = layer_model(fn, model);
  m.num_experts = w.experts.experts();
  m.hidden_size = w.experts.d_model();
  m.expert_size = w.experts.d_ff();
  m.gated = w.experts.gated();
  m.shared_expert_size = s1 ? w.shared.d_ff() : 0;
  if (m.top_k < 1 || m.top_k > m.num_experts)
    throw py::value_error(std::string(fn) + ": model: top_k must be 1 to " + std::to_string(m.num_experts) +
                          " (the experts), got " + std::to_string(m.top_k));
  moecomp::host_matrix<float> no_tokens(0, m.hidden_size);
  const moecomp::matrix_view<const float> xv = xa ? xa->matrix<const float>() : no_tokens.const_view();
  const moecomp::io::safetensors_dtype dtype = storage_dtype(fn, storage);
  mc::compress_params params = compress_params_from(fn, method, experts, features, linkage, merge, similarity, criterion,
                                                    seed, keep, format, values, max_iterations, false, 0, 10, {},
                                                    cka_keywords{similarity_tokens, augment, merge_router, align, samples,
                                                                 global_prune, center, residual, rank});
  if (mc::splits_dense(params.method))
    throw py::value_error(std::string(fn) + ": method " + mc::to_string(params.method) +
                          " splits dense FFNs (compress_checkpoint does it); "
                          "compress_layer takes hc-smoe, cka-merge, m-smoe, resmoe or prune");
  params = resolved(fn, [&] { return mc::resolved_params(params, m, xv.rows() > 0, dtype); });
  mc::storage_dtypes dtypes;
  dtypes.experts = dtypes.router = dtypes.router_bias = dtypes.correction_bias = dtype;
  mc::layer_report report;
  report.layer = "layer";
  const moecomp::host_context ctx(threads);
  mc::compressed_layer c;
  {
    py::gil_scoped_release release;
    c = named(fn, [&] { return mc::compress_layer(ctx, params, m, w, xv, dtypes, report); });
  }
  const index_t I = m.expert_size, H = m.hidden_size;
  const auto ps = [](index_t v) { return static_cast<py::ssize_t>(v); };
  py::dict d;
  std::vector<std::int64_t> slots = c.slots;
  if (c.w1.empty()) {  // prune: the kept experts, gathered from the caller's stack
    const index_t N = static_cast<index_t>(slots.size());
    py::array_t<float> o1({ps(N), ps(I), ps(H)}), o2({ps(N), ps(H), ps(I)}), o3({ps(m.gated ? N : 0), ps(I), ps(H)});
    for (index_t r = 0; r < N; ++r) {
      const index_t e = slots[static_cast<std::size_t>(r)];
      for (index_t i = 0; i < I; ++i)
        for (index_t j = 0; j < H; ++j) {
          o1.mutable_at(r, i, j) = w.experts.w1(e, i, j);
          if (m.gated) o3.mutable_at(r, i, j) = w.experts.w3(e, i, j);
          o2.mutable_at(r, j, i) = w.experts.w2(e, j, i);
        }
      slots[static_cast<std::size_t>(r)] = r;
    }
    d["w1"] = o1;
    d["w3"] = m.gated ? py::object(o3) : py::object(py::none());
    d["w2"] = o2;
  } else {
    const index_t S = c.stack_experts;
    d["w1"] = owned_array<float>(std::move(c.w1), {ps(S), ps(I), ps(H)});
    d["w3"] = m.gated ? py::object(owned_array<float>(std::move(c.w3), {ps(S), ps(I), ps(H)})) : py::object(py::none());
    d["w2"] = owned_array<float>(std::move(c.w2), {ps(S), ps(H), ps(I)});
  }
  d["slots"] = owned_array<std::int64_t>(std::move(slots), {ps(static_cast<index_t>(c.slots.size()))});
  py::array_t<float> orouter = new_matrix<float>(c.router.rows(), c.router.cols());
  std::copy(c.router.data(), c.router.data() + c.router.size(), orouter.mutable_data());
  d["router"] = orouter;
  const auto optional_vector = [&](std::vector<float>& v) -> py::object {
    if (v.empty()) return py::none();
    const auto size = ps(static_cast<index_t>(v.size()));
    return owned_array<float>(std::move(v), {size});
  };
  d["router_bias"] = optional_vector(c.router_bias);
  d["correction_bias"] = optional_vector(c.correction_bias);
  if (c.resmoe) {
    mc::compressed_layer::resmoe_part& r = *c.resmoe;
    py::dict part;
    part["base_w1"] = owned_array<float>(std::move(r.w1), {ps(I), ps(H)});
    part["base_w3"] = m.gated ? py::object(owned_array<float>(std::move(r.w3), {ps(I), ps(H)})) : py::object(py::none());
    part["base_w2"] = owned_array<float>(std::move(r.w2), {ps(H), ps(I)});
    py::array_t<index_t> perms = new_matrix<index_t>(r.permutations.rows(), r.permutations.cols());
    std::copy(r.permutations.data(), r.permutations.data() + r.permutations.size(), perms.mutable_data());
    part["permutations"] = perms;
    py::list residuals;
    for (const moecomp::moe::expert_residual& e : r.residuals) {
      py::dict one;
      one["w1"] = bytes_of(moecomp::io::serialize_residual(e.w1.view()));
      one["w3"] = m.gated ? py::object(bytes_of(moecomp::io::serialize_residual(e.w3.view()))) : py::object(py::none());
      one["w2"] = bytes_of(moecomp::io::serialize_residual(e.w2.view()));
      residuals.append(one);
    }
    part["residuals"] = residuals;
    d["resmoe"] = part;
  } else {
    d["resmoe"] = py::none();
  }
  // The layer's record and the options as compress_checkpoint's report has them.
  mc::checkpoint_report whole;
  whole.params = params;
  whole.family = m.family;
  whole.experts_before = m.num_experts;
  whole.experts_after = params.experts;
  whole.layers.push_back(report);
  const py::object json = py::module_::import("json").attr("loads")(mc::report_json(whole, "", "", 0.0, 0.0).dump());
  d["report"] = json["layers"][py::int_(0)];
  d["options"] = json["options"];
  d["error"] = report.output_relative_error;
  return d;
}

std::uintptr_t address(py::handle x) { return tensor_arg("address", "x", x).address(); }

}  // namespace

PYBIND11_MODULE(moecomp, m) {
  m.doc() = "moecomp: the algorithms behind Mixture-of-Experts compression (docs/python.md). Arrays are numpy "
            "arrays or DLPack exporters (torch tensors), read in place.";
  m.attr("__version__") = MOECOMP_VERSION_STRING;
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const moecomp::invalid_argument& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const moecomp::error& e) {
      PyErr_SetString(PyExc_RuntimeError, e.what());
    }
  });
  m.def("pdist", &pdist, py::arg("x"), py::arg("metric") = "euclidean", py::kw_only(), py::arg("threads") = 0,
        py::arg("out") = py::none(),
        "Condensed pairwise distances of the rows of x (n x d, float32 or float64), scipy.spatial.distance.pdist's "
        "order; metric euclidean, sqeuclidean, cosine or correlation. out: a writable 1-D array of x's dtype and "
        "n (n - 1) / 2 entries (numpy or torch), written in place and returned.");
  m.def("linkage", &linkage, py::arg("x"), py::arg("method") = "single", py::arg("metric") = "euclidean",
        py::kw_only(), py::arg("threads") = 0,
        "scipy.cluster.hierarchy.linkage of the rows of x: the (n - 1) x 4 float64 Z, the same merges, heights "
        "and tie rule.");
  m.def("route", &route, py::arg("logits"), py::arg("rule") = "top_k", py::arg("top_k") = 2,
        py::arg("scores") = "softmax", py::kw_only(), py::arg("renormalize") = false, py::arg("tau") = 0.5,
        py::arg("min_k") = 0, py::arg("max_k") = 0, py::arg("n_group") = 1, py::arg("topk_group") = 1,
        py::arg("routed_scaling_factor") = 1.0, py::arg("bias") = py::none(), py::arg("threads") = 0,
        "Routes tokens (logits T x E) by a rule (top_k, deepseek_v3, group_limited_greedy, threshold, "
        "threshold_code, cumulative, top_p): (ids int64 T x K, weights T x K), each token's experts in descending "
        "score order (ties: the lower index), unused slots id E with weight 0.");
  m.def("cka", &cka, py::arg("x"), py::arg("y"), py::arg("kernel") = "linear", py::kw_only(),
        py::arg("debiased") = false, py::arg("sigma") = 0.0, py::arg("threshold") = 1.0, py::arg("threads") = 0,
        "CKA of two representations of the same n samples (x: n x p, y: n x q): a dict with cka, the three "
        "HSICs, status and the RBF bandwidths.");
  m.def("emd", &emd, py::arg("a"), py::arg("b"), py::arg("cost"), py::kw_only(),
        py::arg("max_iterations") = 100000000, py::arg("mass_tolerance") = 1e-7, py::arg("threads") = 0,
        "Exact optimal transport between histograms a (n) and b (m) for cost (n x m), all of one dtype: "
        "(plan float64 n x m, cost, status), POT's ot.emd.");
  m.def("kmeans", &kmeans, py::arg("x"), py::arg("k"), py::kw_only(), py::arg("init") = "k-means++",
        py::arg("centers") = py::none(), py::arg("sample_weight") = py::none(), py::arg("restarts") = 1,
        py::arg("max_iterations") = 300, py::arg("tolerance") = 1e-4, py::arg("seed") = 0, py::arg("size_min") = 0,
        py::arg("size_max") = 0, py::arg("threads") = 0,
        "Lloyd's k-means of the rows of x (scikit-learn's lloyd; init k-means++ or random, or the given `centers`), "
        "with optional sample weights and cluster size bounds (size_min = size_max = n / k: balanced): a dict with "
        "centers, labels, sizes, inertia, iterations and status.");
  m.def("linear_sum_assignment", &linear_sum_assignment, py::arg("cost"), py::arg("maximize") = false, py::kw_only(),
        py::arg("threads") = 0,
        "The exact linear assignment of scipy.optimize.linear_sum_assignment for an n x m cost, n <= m: (rows, "
        "cols, cost, status).");
  m.def("sinkhorn", &sinkhorn, py::arg("a"), py::arg("b"), py::arg("cost"), py::arg("reg"),
        py::arg("method") = "plain", py::kw_only(), py::arg("max_iterations") = 1000, py::arg("tolerance") = 1e-9,
        py::arg("threads") = 0,
        "Entropic optimal transport (POT's ot.sinkhorn; method plain, log, stabilized or epsilon_scaling): (plan, "
        "cost, status, iterations).");
  m.def("merge_experts", &merge_experts, py::arg("w1"), py::arg("w2"), py::arg("groups"), py::kw_only(),
        py::arg("w3") = py::none(), py::arg("method") = "average", py::arg("x") = py::none(),
        py::arg("router") = py::none(), py::arg("frequencies") = py::none(), py::arg("activation") = "silu",
        py::arg("router_rule") = "auto", py::arg("routing_top_k") = 2, py::arg("frequency_top_k") = 2,
        py::arg("token_cap") = 50000, py::arg("seed") = 0, py::arg("max_iterations") = 100,
        py::arg("report_errors") = true, py::arg("threads") = 0,
        "Merges each group of a layer's experts (w1, w3: E x d_ff x d; w2: E x d x d_ff; float32, float64, "
        "bfloat16 or float16, bf16 results as torch.bfloat16 tensors; x and router float32 for 16-bit weights; "
        "groups: E int64 ids covering 0..g-1) by method average, frequency, uniform, dominant, aligned, fix-dom "
        "or learned: a dict with w1, w2, w3 (g deep), router (g x d, or None for the id map), map, router_rule, "
        "coefficients, and per group dominants, tokens, errors and objectives, and status.");
  m.def("align_rows", &align_rows, py::arg("a"), py::arg("b"), py::arg("objective") = "weights", py::kw_only(),
        py::arg("threads") = 0,
        "p[i] = the row of b matched to row i of a (a: n x f, b: m x f, n <= m), minimising the summed squared "
        "distances (objective weights) or maximising the summed inner products (inner), by an exact assignment: "
        "(p int64, cost, status).");
  m.def("align_stack", &align_stack, py::arg("w1"), py::arg("w2"), py::kw_only(), py::arg("w3") = py::none(),
        py::arg("reference") = 0, py::arg("objective") = "weights", py::arg("x") = py::none(),
        py::arg("activation") = "silu", py::arg("threads") = 0,
        "Each expert's neurons matched to the reference expert's (w1, w3: E x d_ff x d; w2: E x d x d_ff): "
        "(permutations int64 E x d_ff, cost, status); row e, p, puts expert e in the reference's order "
        "(permute_neurons). objective weights or inner compare design rows [W1 | W3 | W2^T]; correlation compares "
        "the hidden activations on the tokens x.");
  m.def("design_matrix", &design_matrix, py::arg("w1"), py::arg("w2"), py::kw_only(), py::arg("w3") = py::none(),
        py::arg("threads") = 0,
        "One expert's design rows [W1 | W3 | W2^T] (w1, w3: d_ff x d; w2: d x d_ff): d_ff x (2 or 3) d.");
  m.def("permute_neurons", &permute_neurons, py::arg("w1"), py::arg("w2"), py::arg("p"), py::kw_only(),
        py::arg("w3") = py::none(), py::arg("threads") = 0,
        "One expert with neuron i taken from neuron p[i] (rows of w1 and w3, columns of w2): a dict with w1, w2, "
        "w3; the same function.");
  m.def("prune", &prune, py::arg("w"), py::kw_only(), py::arg("sparsity") = py::none(), py::arg("keep") = py::none(),
        py::arg("scope") = "matrix", py::arg("column_block") = 0, py::arg("n") = 2, py::arg("m") = 4,
        py::arg("out") = py::none(), py::arg("threads") = 0,
        "Magnitude pruning with torch.nn.utils.prune.l1_unstructured's count (sparsity: torch's amount, or keep) "
        "over the matrix, each row, each column_block, or N:M (scope n_of_m): (pruned, kept, threshold). out: a "
        "writable array of w's dtype (w itself: in place).");
  m.def("encode_residual", &encode_residual, py::arg("base"), py::arg("w"), py::kw_only(),
        py::arg("permutation") = py::none(), py::arg("sparsity") = py::none(), py::arg("keep") = py::none(),
        py::arg("scope") = "matrix", py::arg("column_block") = 0, py::arg("n") = 2, py::arg("m") = 4,
        py::arg("format") = "auto", py::arg("values") = "fp32", py::arg("threads") = 0,
        "ResMoE's residual R(p(i), :) = w(i, :) - base(p(i), :), pruned and encoded: (residual bytes, a moecomp "
        "residual file; info dict with format, bytes, bits_per_weight, kept, pruned, threshold, squared_error).");
  m.def("decode_residual", &decode_residual, py::arg("residual"), py::kw_only(), py::arg("threads") = 0,
        "The stored values of a residual (bytes of a moecomp residual file) as a dense float32 matrix.");
  m.def("restore_dense", &restore_dense, py::arg("base"), py::arg("residual"), py::kw_only(),
        py::arg("permutation") = py::none(), py::arg("out") = py::none(), py::arg("threads") = 0,
        "base + residual in w's own row order (out(i, :) = base(p(i), :) + R(p(i), :)), in base's dtype or "
        "written into out.");
  m.def("encode_expert_residual", &encode_expert_residual, py::arg("base_w1"), py::arg("base_w2"), py::arg("w1"),
        py::arg("w2"), py::kw_only(), py::arg("base_w3") = py::none(), py::arg("w3") = py::none(),
        py::arg("permutation") = py::none(), py::arg("sparsity") = py::none(), py::arg("keep") = py::none(),
        py::arg("scope") = "matrix", py::arg("column_block") = 0, py::arg("n") = 2, py::arg("m") = 4,
        py::arg("format") = "auto", py::arg("values") = "fp32", py::arg("threads") = 0,
        "One expert against a base expert as ResMoE stores it: the design residual pruned as one matrix, split "
        "into w1, w3, w2 residuals (bytes of moecomp residual files); a dict with them and the pruning, bytes, "
        "bits_per_weight and squared_error.");
  m.def("partition_experts", &partition_experts, py::arg("distances"), py::arg("groups"), py::kw_only(),
        py::arg("max_size") = 0, py::arg("method") = "auto", py::arg("restarts") = 10, py::arg("kicks") = 20,
        py::arg("seed") = 0, py::arg("exact_limit") = 16, py::arg("symmetry_tolerance") = 1e-6,
        py::arg("threads") = 0,
        "The expert-graph partition (Eq. 5 of the fourth paper) of N experts into `groups` groups minimising the "
        "within-group distance: a dict with labels, objective, within, total, lower_bound, within_lower_bound, "
        "optimal, method, best_restart, iterations, status.");
  m.def("cka_matrix", &cka_matrix, py::arg("features"), py::arg("kernel") = "linear", py::kw_only(),
        py::arg("debiased") = false, py::arg("sigma") = 0.0, py::arg("threshold") = 1.0, py::arg("threads") = 0,
        "The E x E CKA matrix of E representations of the same n samples (features: E x n x d): a dict with cka "
        "(float64), route, undefined_pairs, first_undefined.");
  m.def("dispatch_plan", &dispatch_plan, py::arg("ids"), py::arg("experts"), py::kw_only(), py::arg("block_size") = 1,
        py::arg("capacity") = 0, py::arg("threads") = 0,
        "The dispatch plan of a T x K int64 id layout (route's; id E: unused) over E experts, vLLM's "
        "moe_align_block_size: a dict with sorted_token_ids, expert_ids, counts, offsets, position, "
        "num_tokens_post_pad, dropped.");
  m.def("moe_layer_forward", &moe_layer_forward, py::arg("x"), py::arg("router"), py::arg("w1"), py::arg("w2"),
        py::kw_only(), py::arg("w3") = py::none(), py::arg("rule") = "top_k", py::arg("top_k") = 2,
        py::arg("scores") = "softmax", py::arg("renormalize") = false, py::arg("tau") = 0.5, py::arg("min_k") = 0,
        py::arg("max_k") = 0, py::arg("n_group") = 1, py::arg("topk_group") = 1,
        py::arg("routed_scaling_factor") = 1.0, py::arg("router_bias") = py::none(),
        py::arg("expert_map") = py::none(), py::arg("shared_w1") = py::none(), py::arg("shared_w3") = py::none(),
        py::arg("shared_w2") = py::none(), py::arg("shared_gate") = py::none(), py::arg("activation") = "silu",
        py::arg("matmul") = "exact", py::arg("threads") = 0,
        "The MoE layer y = sum_k w_tk f_map(e_tk)(x_t) + shared experts, routed as route() routes: y (T x d). "
        "matmul='bf16' with bfloat16 weights: tokens rounded to bfloat16, bfloat16 dot products, float sums.");
  m.def("compress_layer", &compress_layer, py::arg("w1"), py::arg("w2"), py::arg("router"), py::arg("x"),
        py::kw_only(), py::arg("w3") = py::none(), py::arg("method"), py::arg("experts") = 0,
        py::arg("features") = "auto", py::arg("linkage") = "average", py::arg("merge") = py::none(),
        py::arg("similarity") = "auto", py::arg("criterion") = "frequency", py::arg("seed") = 0,
        py::arg("keep") = 0.25, py::arg("format") = "auto", py::arg("values") = py::none(),
        py::arg("max_iterations") = 0, py::arg("router_bias") = py::none(), py::arg("correction_bias") = py::none(),
        py::arg("shared_w1") = py::none(), py::arg("shared_w3") = py::none(), py::arg("shared_w2") = py::none(),
        py::arg("shared_gate") = py::none(), py::arg("model") = py::dict(), py::arg("storage") = "float32",
        py::arg("similarity_tokens") = 0, py::arg("augment") = 0, py::arg("merge_router") = "auto",
        py::arg("align") = "none", py::arg("samples") = 0, py::arg("global_prune") = false, py::arg("center") = "barycenter",
        py::arg("residual") = "prune", py::arg("rank") = 0, py::arg("threads") = 0,
        "One MoE layer compressed as compress_checkpoint compresses each (float32 tensors read in place): a dict "
        "with w1, w3, w2 (the new stack), slots (router id -> stack expert), router, router_bias, "
        "correction_bias, resmoe (base, permutations, residuals) or None, report, options and error.");
  m.def("compress_checkpoint", &compress_checkpoint, py::arg("model_dir"), py::arg("out_dir"), py::arg("method"),
        py::kw_only(), py::arg("experts") = 0, py::arg("calibration") = py::none(), py::arg("features") = "auto",
        py::arg("linkage") = "average", py::arg("merge") = py::none(), py::arg("similarity") = "auto",
        py::arg("criterion") = "frequency", py::arg("seed") = 0, py::arg("keep") = 0.25, py::arg("format") = "auto",
        py::arg("values") = py::none(), py::arg("max_iterations") = 0, py::arg("restore_dense") = false,
        py::arg("top_k") = 0, py::arg("restarts") = 10, py::arg("expert_size") = 0, py::arg("router_hidden") = 128,
        py::arg("router_bias") = false, py::arg("router_objective") = "norm", py::arg("router_lr") = 1e-3,
        py::arg("router_epochs") = 10, py::arg("router_steps") = 0, py::arg("router_batch_size") = 64,
        py::arg("tau") = py::none(), py::arg("similarity_tokens") = 0, py::arg("augment") = 0,
        py::arg("merge_router") = "auto", py::arg("align") = "none", py::arg("samples") = 0, py::arg("global_prune") = false, py::arg("center") = "barycenter",
        py::arg("residual") = "prune", py::arg("rank") = 0, py::arg("layouts") = py::none(),
        py::arg("progress") = py::none(), py::arg("threads") = 0, py::arg("expert_storage") = "distinct",
        py::arg("layers") = py::none(), py::arg("work_dir") = py::none(), py::arg("layer_reports") = py::none(),
        "A Hugging Face checkpoint compressed as `moecomp compress` compresses it (the same files): written into "
        "out_dir (replaced whole, through a staging directory beside it); returns compression_report.json as a "
        "dict. progress: a callable(layer, layers, name, step). In parts over processes: each part passes its "
        "layers and a shared work_dir and returns {'layers': records}; one call with layer_reports (every part's "
        "records) finishes the checkpoint and moves work_dir to out_dir.");
  m.def("assign_layers", &assign_layers_of, py::arg("model_dir"), py::arg("parts"), py::kw_only(),
        py::arg("layouts") = py::none(),
        "The MoE layers of model_dir spread over `parts` processes, balanced by bytes (compress::assign_layers): a "
        "list of `parts` ascending lists of layer indices, the same on every process.");
  m.attr("default_layouts") = MOECOMP_SOURCE_LAYOUTS_DIR;
  m.def("normal", &normal, py::arg("rows"), py::arg("cols"), py::arg("seed") = 0, py::arg("stream") = 0,
        "rows x cols float64 standard normals from moecomp's seeded generator (the same numbers on every platform "
        "and thread count; the tests' data).");
  m.def("_address", &address, py::arg("x"),
        "The address of x's first element as moecomp sees it (tests check that inputs are not copied).");
}
