#include "process_group.hpp"

#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#if defined(MOECOMP_CLI_MPI)
#include <mpi.h>
#endif

namespace moecomp_cli {

/// The rank count a launcher announces in the environment, or 1: Open MPI's mpirun (OMPI_COMM_WORLD_SIZE), a PMI
/// launcher such as MPICH's mpiexec or srun --mpi=pmi2 (PMI_SIZE), srun's job step (SLURM_STEP_NUM_TASKS; not
/// SLURM_NTASKS, which a batch script sees too). MPI is initialised only above 1, so that a plain
/// `moecomp compress`, also inside an allocation, never touches MPI.
int launcher_size() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_STEP_NUM_TASKS"}) {
    const char* value = std::getenv(name);
    if (value == nullptr) continue;
    const int n = std::atoi(value);
    if (n > 1) return n;
  }
  return 1;
}

int launcher_rank() {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"}) {
    const char* value = std::getenv(name);
    if (value != nullptr) return std::atoi(value);
  }
  return 0;
}

namespace {

#if defined(MOECOMP_CLI_MPI)
void check(int code, const char* what) {
  if (code != MPI_SUCCESS) throw std::runtime_error(std::string("MPI: ") + what + " failed");
}
#endif

}  // namespace

process_group& process_group::world() {
  static process_group group;
  return group;
}

process_group::process_group() {
#if defined(MOECOMP_CLI_MPI)
  if (launcher_size() <= 1) return;
  int initialised = 0;
  check(MPI_Initialized(&initialised), "MPI_Initialized");
  if (!initialised) check(MPI_Init(nullptr, nullptr), "MPI_Init");
  mpi_ = true;
  check(MPI_Comm_rank(MPI_COMM_WORLD, &rank_), "MPI_Comm_rank");
  check(MPI_Comm_size(MPI_COMM_WORLD, &size_), "MPI_Comm_size");
#endif
}

int process_group::first_failure(bool failed) {
  if (!mpi_) return failed ? 0 : 1;
#if defined(MOECOMP_CLI_MPI)
  int mine = failed ? rank_ : size_, first = size_;
  check(MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD), "MPI_Allreduce");
  return first;
#else
  return size_;
#endif
}

std::string process_group::broadcast(const std::string& text, int root) {
  if (!mpi_) return text;
#if defined(MOECOMP_CLI_MPI)
  unsigned long long length = text.size();
  check(MPI_Bcast(&length, 1, MPI_UNSIGNED_LONG_LONG, root, MPI_COMM_WORLD), "MPI_Bcast");
  std::string out = rank_ == root ? text : std::string(static_cast<std::size_t>(length), '\0');
  if (length > 0) check(MPI_Bcast(out.data(), static_cast<int>(length), MPI_CHAR, root, MPI_COMM_WORLD), "MPI_Bcast");
  return out;
#else
  (void)root;
  return text;
#endif
}

std::vector<std::string> process_group::gather(const std::string& text, int root) {
  if (!mpi_) return {text};
#if defined(MOECOMP_CLI_MPI)
  // Reports are a few kB per layer; an int count is far from their limit.
  if (text.size() > static_cast<std::size_t>(1 << 30)) throw std::runtime_error("MPI: a rank's reports exceed 1 GiB");
  int length = static_cast<int>(text.size());
  std::vector<int> lengths(rank_ == root ? static_cast<std::size_t>(size_) : 0);
  check(MPI_Gather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, root, MPI_COMM_WORLD), "MPI_Gather");
  std::vector<int> offsets(lengths.size(), 0);
  std::size_t total = 0;
  for (std::size_t r = 0; r < lengths.size(); ++r) {
    offsets[r] = static_cast<int>(total);
    total += static_cast<std::size_t>(lengths[r]);
  }
  std::string all(total, '\0');
  check(MPI_Gatherv(text.data(), length, MPI_CHAR, all.data(), lengths.data(), offsets.data(), MPI_CHAR, root,
                    MPI_COMM_WORLD),
        "MPI_Gatherv");
  std::vector<std::string> out;
  for (std::size_t r = 0; r < lengths.size(); ++r)
    out.push_back(all.substr(static_cast<std::size_t>(offsets[r]), static_cast<std::size_t>(lengths[r])));
  return out;
#else
  (void)root;
  return {text};
#endif
}

void process_group::finalize() {
#if defined(MOECOMP_CLI_MPI)
  if (mpi_) {
    MPI_Finalize();
    mpi_ = false;
  }
#endif
}

std::string process_group::description() const {
#if defined(MOECOMP_CLI_MPI)
  if (mpi_) {
    char version[MPI_MAX_LIBRARY_VERSION_STRING];
    int length = 0;
    MPI_Get_library_version(version, &length);
    std::string text(version, static_cast<std::size_t>(length));
    const auto comma = text.find(',');
    return "MPI, " + std::to_string(size_) + " ranks (" + text.substr(0, comma) + ")";
  }
#endif
  return "single process";
}

}  // namespace moecomp_cli
