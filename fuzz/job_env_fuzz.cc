// The launcher environments a worker reads at start (chorusrun, torchrun, OpenMPI, Slurm,
// TF_CONFIG): the input is lines "NAME=VALUE", set for one read_job_env() and then unset.
// Only the variables read_job_env looks at are set (not CHORUS_SECRET_FILE: no file reads).
#include <cstdlib>
#include <set>

#include "fuzz_support.h"
#include "rendezvous/job_env.h"

namespace chorus::fuzz {
namespace {

const std::set<std::string>& known_names() {
  static const std::set<std::string> names = {"CHORUS_CROSS_RANK",
                                              "CHORUS_CROSS_SIZE",
                                              "CHORUS_LAUNCHER",
                                              "CHORUS_LOCAL_RANK",
                                              "CHORUS_LOCAL_SIZE",
                                              "CHORUS_RANK",
                                              "CHORUS_RESTART_COUNT",
                                              "CHORUS_SECRET",
                                              "CHORUS_SIZE",
                                              "CHORUS_STORE_ADDR",
                                              "CHORUS_STORE_PORT",
                                              "GROUP_RANK",
                                              "GROUP_WORLD_SIZE",
                                              "LOCAL_RANK",
                                              "LOCAL_WORLD_SIZE",
                                              "MASTER_ADDR",
                                              "MASTER_PORT",
                                              "OMPI_COMM_WORLD_LOCAL_RANK",
                                              "OMPI_COMM_WORLD_LOCAL_SIZE",
                                              "OMPI_COMM_WORLD_RANK",
                                              "OMPI_COMM_WORLD_SIZE",
                                              "RANK",
                                              "SLURMD_NODENAME",
                                              "SLURM_JOB_ID",
                                              "SLURM_JOB_NODELIST",
                                              "SLURM_LOCALID",
                                              "SLURM_NNODES",
                                              "SLURM_NODEID",
                                              "SLURM_NODELIST",
                                              "SLURM_NPROCS",
                                              "SLURM_NTASKS",
                                              "SLURM_PROCID",
                                              "SLURM_STEPID",
                                              "SLURM_STEP_ID",
                                              "SLURM_STEP_NODELIST",
                                              "SLURM_STEP_TASKS_PER_NODE",
                                              "SLURM_TASKS_PER_NODE",
                                              "TF_CONFIG",
                                              "TORCHELASTIC_RESTART_COUNT",
                                              "TORCHELASTIC_USE_AGENT_STORE",
                                              "WORLD_SIZE"};
  return names;
}

// Sets each known NAME=VALUE line of `text` (a NUL ends a value, as in a real environment).
std::vector<std::string> set_lines(std::string_view text) {
  std::vector<std::string> set;
  while (!text.empty()) {
    size_t end = text.find('\n');
    std::string line(text.substr(0, end));
    text = end == std::string_view::npos ? std::string_view() : text.substr(end + 1);
    size_t eq = line.find('=');
    if (eq == std::string::npos) continue;
    std::string name = line.substr(0, eq);
    if (known_names().count(name) == 0) continue;
    ::setenv(name.c_str(), line.c_str() + eq + 1, 1);
    set.push_back(name);
  }
  return set;
}

}  // namespace
}  // namespace chorus::fuzz

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  for (const auto& name : chorus::fuzz::known_names()) ::unsetenv(name.c_str());
  ::unsetenv("CHORUS_SECRET_FILE");
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace chorus;
  std::vector<std::string> set = fuzz::set_lines(fuzz::as_view(data, size));
  fuzz::expect_chorus_errors([] { read_job_env(); });
  for (const auto& name : set) ::unsetenv(name.c_str());
  return 0;
}
