// The build found no MPI (DEEPWIRE_MPI): distributed training says so and how to get it.
#include "engine/distributed/communicator.h"

namespace dw::engine::distributed {

bool mpiBuilt() {
  return false;
}

Result<std::shared_ptr<Communicator>> mpiCommunicator(double) {
  return Status::error(
      "this deepwire was built without MPI, so it cannot train across processes: install "
      "Open MPI (Debian: libopenmpi-dev openmpi-bin) and rebuild, or train without "
      "--distributed");
}

}  // namespace dw::engine::distributed
