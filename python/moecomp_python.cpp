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
#include <moecomp/interop/dlpack.hpp>

#include <dlpack/dlpack.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

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
  m.def("normal", &normal, py::arg("rows"), py::arg("cols"), py::arg("seed") = 0, py::arg("stream") = 0,
        "rows x cols float64 standard normals from moecomp's seeded generator (the same numbers on every platform "
        "and thread count; the tests' data).");
  m.def("_address", &address, py::arg("x"),
        "The address of x's first element as moecomp sees it (tests check that inputs are not copied).");
}
