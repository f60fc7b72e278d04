// What data-parallel training needs from a transport: sums across processes, a broadcast from
// one process, and a barrier. The trainer depends on this interface alone; the MPI
// implementation exists where the build found MPI (DEEPWIRE_MPI, like DEEPWIRE_CUDA).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "nodes/status.h"

namespace dw::engine::distributed {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // This process's host name, and every rank's (gathered once, at creation).
  virtual const std::vector<std::string>& hosts() const = 0;
  // In place: every rank ends with the same sum over ranks, element by element.
  virtual Status allreduceSum(float* data, int64_t count) = 0;
  virtual Status allreduceSum(double* data, int64_t count) = 0;
  // `bytes` from `root` into every other rank's `data`.
  virtual Status broadcast(void* data, int64_t bytes, int root) = 0;
  virtual Status barrier() = 0;
  // Sums started now and completed later, so that they overlap with computation: startSum
  // begins summing `data` in place; progress() moves the started sums along (MPI moves a
  // message only inside its calls: call it often, between pieces of work); finishSums()
  // completes all of them. `data` must stay untouched until then. Every process starts the
  // same sums in the same order.
  virtual Status startSum(float* data, int64_t count) = 0;
  virtual Status progress() = 0;
  virtual Status finishSums() = 0;
  // Ends every process of the job now, with `code`: after an error on one process, since the
  // others may be waiting in a collective that can no longer complete.
  [[noreturn]] virtual void abort(int code) = 0;
  // Seconds spent waiting in collectives so far: what communication costs a run.
  virtual double waitSeconds() const = 0;
};

// One process: sums and broadcasts leave the data as it is.
std::shared_ptr<Communicator> localCommunicator();

// True when this build has MPI (DEEPWIRE_MPI found it).
bool mpiBuilt();
// True when this process was started by an MPI launcher (mpirun sets its rank variables).
bool launchedByMpi();
// The MPI world: initializes MPI on first use (finalized at exit). An error names what is
// missing when the build has no MPI. A collective that has not completed after
// `timeoutSeconds` (a process stopped, hung or lost its network) is an error, not a wait
// forever.
Result<std::shared_ptr<Communicator>> mpiCommunicator(double timeoutSeconds = 300);

}  // namespace dw::engine::distributed
