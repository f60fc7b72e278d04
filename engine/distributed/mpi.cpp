// The MPI world as a Communicator (built where DEEPWIRE_MPI found MPI).
#include <mpi.h>

#include <climits>
#include <cstdlib>

#include "engine/distributed/communicator.h"

namespace dw::engine::distributed {

namespace {

std::string mpiError(const char* what, int code) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  MPI_Error_string(code, text, &len);
  return std::string("MPI ") + what + " failed: " + std::string(text, static_cast<size_t>(len));
}

class Mpi : public Communicator {
 public:
  Mpi() {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    char name[MPI_MAX_PROCESSOR_NAME] = {};
    int len = 0;
    MPI_Get_processor_name(name, &len);
    std::vector<char> all(static_cast<size_t>(size_) * MPI_MAX_PROCESSOR_NAME);
    MPI_Allgather(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, all.data(), MPI_MAX_PROCESSOR_NAME,
                  MPI_CHAR, MPI_COMM_WORLD);
    for (int r = 0; r < size_; ++r)
      hosts_.emplace_back(&all[static_cast<size_t>(r) * MPI_MAX_PROCESSOR_NAME]);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::vector<std::string>& hosts() const override { return hosts_; }
  Status allreduceSum(float* data, int64_t count) override {
    return reduce(data, count, MPI_FLOAT, sizeof(float));
  }
  Status allreduceSum(double* data, int64_t count) override {
    return reduce(data, count, MPI_DOUBLE, sizeof(double));
  }
  Status broadcast(void* data, int64_t bytes, int root) override {
    auto* p = static_cast<char*>(data);
    for (int64_t done = 0; done < bytes;) {
      const int n = static_cast<int>(std::min<int64_t>(bytes - done, INT_MAX));
      if (int e = MPI_Bcast(p + done, n, MPI_BYTE, root, MPI_COMM_WORLD); e != MPI_SUCCESS)
        return Status::error(mpiError("broadcast", e));
      done += n;
    }
    return Status();
  }
  Status barrier() override {
    if (int e = MPI_Barrier(MPI_COMM_WORLD); e != MPI_SUCCESS)
      return Status::error(mpiError("barrier", e));
    return Status();
  }

 private:
  // MPI counts are ints: large buffers go in chunks.
  Status reduce(void* data, int64_t count, MPI_Datatype type, size_t elem) {
    auto* p = static_cast<char*>(data);
    for (int64_t done = 0; done < count;) {
      const int n = static_cast<int>(std::min<int64_t>(count - done, INT_MAX / 8));
      if (int e = MPI_Allreduce(MPI_IN_PLACE, p + done * static_cast<int64_t>(elem), n, type,
                                MPI_SUM, MPI_COMM_WORLD);
          e != MPI_SUCCESS)
        return Status::error(mpiError("allreduce", e));
      done += n;
    }
    return Status();
  }

  int rank_ = 0, size_ = 1;
  std::vector<std::string> hosts_;
};

}  // namespace

bool mpiBuilt() {
  return true;
}

Result<std::shared_ptr<Communicator>> mpiCommunicator() {
  static std::shared_ptr<Communicator> world;
  if (world) return world;
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int provided = 0;
    // Errors come back as codes, so a failure becomes a deepwire error rather than an abort.
    if (int e = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided); e != MPI_SUCCESS)
      return Status::error(mpiError("initialization", e));
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    std::atexit([] {
      int finalized = 0;
      MPI_Finalized(&finalized);
      if (!finalized) MPI_Finalize();
    });
  }
  world = std::make_shared<Mpi>();
  return world;
}

}  // namespace dw::engine::distributed
