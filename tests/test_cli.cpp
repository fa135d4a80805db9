// The moecomp tool, black-box: results, --json, and the error contract (exit 2, exactly one
// "moecomp: error:" line naming the argument, no output file left behind).
#include <doctest/doctest.h>
#include <moecomp/io/npy.hpp>
#include <moecomp/moecomp.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>

namespace {

struct run_result {
  int status;
  std::string out, err;
};

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

bool exists(const std::string& path) { return std::ifstream(path).good(); }

/// A scratch directory per test process, removed with everything in it when the process ends.
struct scratch_directory {
  std::string path;
  scratch_directory() {
    char templ[] = "/tmp/moecomp-cli-test-XXXXXX";
    const char* made = mkdtemp(templ);
    REQUIRE(made != nullptr);
    path = made;
  }
  ~scratch_directory() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
};
const std::string& scratch() {
  static const scratch_directory dir;
  return dir.path;
}

std::string path(const std::string& name) { return scratch() + "/" + name; }

run_result run(const std::string& arguments) {
  const std::string out = path("stdout.txt"), err = path("stderr.txt");
  const std::string command = std::string(MOECOMP_CLI_PATH) + " " + arguments + " >" + out + " 2>" + err;
  const int raw = std::system(command.c_str());
  REQUIRE(raw != -1);
  REQUIRE(WIFEXITED(raw));
  return {WEXITSTATUS(raw), slurp(out), slurp(err)};
}

/// The error contract: status 2, one line on stderr starting "moecomp: error:", containing every `needle`.
void check_usage_error(const run_result& r, std::initializer_list<const char*> needles) {
  INFO("stderr: " << r.err);
  CHECK(r.status == 2);
  CHECK(r.err.rfind("moecomp: error: ", 0) == 0);
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  for (const char* needle : needles) CHECK(r.err.find(needle) != std::string::npos);
}

template <class T>
std::string save_matrix(const std::string& name, std::initializer_list<T> values, moecomp::index_t rows,
                        moecomp::index_t cols) {
  std::vector<T> data(values);
  moecomp::io::write_npy(path(name), moecomp::make_matrix_view(data.data(), rows, cols).as_const());
  return path(name);
}

}  // namespace

TEST_CASE("--version and --help") {
  const auto v = run("--version");
  CHECK(v.status == 0);
  CHECK(v.out == std::string("moecomp ") + MOECOMP_VERSION_STRING + "\n");
  const auto h = run("--help");
  CHECK(h.status == 0);
  CHECK(h.out.find("pdist") != std::string::npos);
  const auto ph = run("pdist --help");
  CHECK(ph.status == 0);
  CHECK(ph.out.find("usage: moecomp pdist X.npy") != std::string::npos);
  CHECK(ph.out.find("--metric") != std::string::npos);
}

TEST_CASE("pdist writes scipy's condensed float64 distances and a JSON summary") {
  const std::string x = save_matrix<double>("triangle.npy", {0, 0, 3, 0, 0, 4}, 3, 2);
  const std::string out = path("d.npy");
  const auto r = run("pdist " + x + " -o " + out + " --json");
  REQUIRE(r.status == 0);
  CHECK(r.err.empty());
  CHECK(r.out.find("\"command\": \"pdist\"") != std::string::npos);
  CHECK(r.out.find("\"n\": 3") != std::string::npos);
  CHECK(r.out.find("\"seconds\": ") != std::string::npos);
  const auto d = moecomp::io::read_npy(out);
  REQUIRE(d.dtype() == moecomp::io::npy_dtype::float64);
  const auto v = d.vector<double>();
  REQUIRE(v.size() == 3);
  CHECK(v(0) == 3.0);
  CHECK(v(1) == 4.0);
  CHECK(v(2) == 5.0);

  // float32 input computes in float32 and still writes float64; --dtype float64 overrides
  const std::string xf = save_matrix<float>("trianglef.npy", {0, 0, 3, 0, 0, 4}, 3, 2);
  REQUIRE(run("pdist " + xf + " --metric sqeuclidean -o " + out).status == 0);
  const auto df = moecomp::io::read_npy(out);
  CHECK(df.dtype() == moecomp::io::npy_dtype::float64);
  CHECK(df.vector<double>()(2) == doctest::Approx(25.0).epsilon(1e-6));  // computed in float32
  const auto j = run("pdist " + xf + " --dtype float64 --json");
  CHECK(j.status == 0);
  CHECK(j.out.find("\"dtype\": \"float64\"") != std::string::npos);
}

TEST_CASE("bad input exits 2 with one line naming the argument and leaves no output file") {
  const std::string good = save_matrix<double>("good.npy", {0, 1, 2, 3}, 2, 2);
  const std::string out = path("never.npy");

  check_usage_error(run("pdist " + good + " --metric manhattan -o " + out), {"--metric", "'manhattan'"});
  check_usage_error(run("pdist " + path("missing.npy") + " -o " + out), {"missing.npy"});
  {
    std::ofstream(path("text.npy")) << "this is not an npy file\n";
    check_usage_error(run("pdist " + path("text.npy") + " -o " + out), {"text.npy"});
  }
  {
    std::vector<double> v{1, 2, 3};
    moecomp::io::write_npy(path("vector.npy"), moecomp::make_vector_view(v.data(), 3).as_const());
    check_usage_error(run("pdist " + path("vector.npy") + " -o " + out), {"vector.npy", "2-D", "(3,)"});
  }
  {
    std::vector<std::int64_t> ints{1, 2, 3, 4};
    moecomp::io::write_npy(path("ints.npy"), moecomp::make_matrix_view(ints.data(), 2, 2).as_const());
    check_usage_error(run("pdist " + path("ints.npy") + " -o " + out), {"ints.npy", "int64", "float32 or float64"});
  }
  const std::string with_nan =
      save_matrix<double>("nan.npy", {0, 1, std::numeric_limits<double>::quiet_NaN(), 3}, 2, 2);
  check_usage_error(run("pdist " + with_nan + " -o " + out), {"nan.npy", "element (1, 0)", "finite"});
  check_usage_error(run("pdist " + good + " -o " + path("no/such/dir/d.npy")), {"no/such/dir"});
  check_usage_error(run("pdist " + good + " --bogus"), {"unknown option", "--bogus"});
  check_usage_error(run("pdist"), {"expected 1 input file", "got 0"});
  check_usage_error(run("pdist " + good + " " + good), {"got 2"});
  check_usage_error(run("pdist " + good + " --threads many"), {"--threads", "'many'"});
  check_usage_error(run("pdist " + good + " --dtype float16"), {"--dtype", "'float16'"});
  check_usage_error(run("pdist " + good + " --matmul fp16"), {"--matmul", "expected exact or bf16", "'fp16'"});
  check_usage_error(run("nosuchcommand"), {"unknown command", "nosuchcommand"});
  CHECK_FALSE(exists(out));
  CHECK_FALSE(exists(path("no/such/dir/d.npy")));
}

TEST_CASE("a failed run leaves an existing output file untouched") {
  const std::string good = save_matrix<double>("good2.npy", {0, 1, 2, 3}, 2, 2);
  const std::string out = path("keep.npy");
  std::ofstream(out) << "previous contents";
  check_usage_error(run("pdist " + good + " --metric nope -o " + out), {"--metric"});
  CHECK(slurp(out) == "previous contents");
  REQUIRE(run("pdist " + good + " -o " + out).status == 0);  // success replaces it
  CHECK(moecomp::io::read_npy(out).vector<double>()(0) == doctest::Approx(std::sqrt(8.0)));
}
