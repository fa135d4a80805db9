// The processes one `moecomp compress` run is spread over (docs/cli.md, "compress on several processes"):
// MPI's ranks when the tool is built with MPI (MOECOMP_CLI_MPI) and started by a launcher with more than one
// rank (mpirun, srun), else this process alone. The library knows nothing of it: the tool hands each rank its
// layers through compress::compress_checkpoint_layers and lets rank 0 finish (compress::finish_checkpoint).
#pragma once

#include <string>
#include <vector>

namespace moecomp_cli {

/// The rank count a launcher announces in the environment (mpirun, a PMI launcher, srun's job step), or 1; and
/// this process's rank among them (0 when none is announced). Read without initialising MPI.
int launcher_size();
int launcher_rank();

class process_group {
 public:
  /// This process's group, MPI's world once MPI is initialised (at the first call, only under a launcher
  /// that says there is more than one rank; single otherwise).
  static process_group& world();
  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }
  bool distributed() const noexcept { return size_ > 1; }
  /// The lowest rank whose `failed` is true, or size() when none is: every rank learns who failed first.
  int first_failure(bool failed);
  /// `text` from `root` to every rank (returned on every rank).
  std::string broadcast(const std::string& text, int root);
  /// Every rank's `text` at `root`, in rank order (empty elsewhere).
  std::vector<std::string> gather(const std::string& text, int root);
  /// Ends MPI after a run every rank finished: call on success only. A rank that fails exits without it, so
  /// that the launcher ends the others (mpirun does on a rank that exits without finalising).
  void finalize();
  /// Where the group comes from, for messages: "MPI (Open MPI ...)" or "single process".
  std::string description() const;

 private:
  process_group();
  int rank_ = 0, size_ = 1;
  bool mpi_ = false;
};

}  // namespace moecomp_cli
