#include "engine/distributed/communicator.h"

#include <unistd.h>

#include <cstdlib>

namespace dw::engine::distributed {

namespace {

class Local : public Communicator {
 public:
  Local() {
    char name[256] = {};
    gethostname(name, sizeof name - 1);
    hosts_ = {name};
  }
  int rank() const override { return 0; }
  int size() const override { return 1; }
  const std::vector<std::string>& hosts() const override { return hosts_; }
  Status allreduceSum(float*, int64_t) override { return Status(); }
  Status allreduceSum(double*, int64_t) override { return Status(); }
  Status broadcast(void*, int64_t, int) override { return Status(); }
  Status barrier() override { return Status(); }
  Status startSum(float*, int64_t) override { return Status(); }
  Status progress() override { return Status(); }
  Status finishSums() override { return Status(); }
  [[noreturn]] void abort(int code) override { std::exit(code); }
  double waitSeconds() const override { return 0; }

 private:
  std::vector<std::string> hosts_;
};

}  // namespace

std::shared_ptr<Communicator> localCommunicator() {
  return std::make_shared<Local>();
}

bool launchedByMpi() {
  // Open MPI's launcher, and the PMI/PMIx variables other launchers (MPICH's hydra, Slurm) set.
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"})
    if (std::getenv(v)) return true;
  return false;
}

}  // namespace dw::engine::distributed
