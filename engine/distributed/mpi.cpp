// The MPI world as a Communicator (built where DEEPWIRE_MPI found MPI).
#include <mpi.h>

#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <thread>

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
  // `progressThread`: whether MPI allows calls from a second thread (MPI_THREAD_SERIALIZED).
  Mpi(double timeout, bool progressThread) : timeout_(timeout) {
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
    // Its own communicator, so that no probe is ever matched against the training's traffic.
    MPI_Comm_dup(MPI_COMM_WORLD, &probes_);
    MPI_Comm_set_errhandler(probes_, MPI_ERRORS_RETURN);
    if (progressThread) progress_ = std::thread([this] { driveSums(); });
  }
  ~Mpi() override {
    if (progress_.joinable()) {
      {
        std::lock_guard<std::mutex> lock(mpi_);
        stop_ = true;
      }
      started_.notify_one();
      progress_.join();
    }
    // probes_ goes with MPI_Finalize: freeing it is collective, and the processes end apart.
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::vector<std::string>& hosts() const override { return hosts_; }
  Status allreduceSum(float* data, int64_t count) override {
    return reduce(data, count, MPI_FLOAT, sizeof(float), "gradient sum");
  }
  Status allreduceSum(double* data, int64_t count) override {
    return reduce(data, count, MPI_DOUBLE, sizeof(double), "sum of the step's losses and counts");
  }
  Status broadcast(void* data, int64_t bytes, int root) override {
    auto* p = static_cast<char*>(data);
    for (int64_t done = 0; done < bytes;) {
      const int n = static_cast<int>(std::min<int64_t>(bytes - done, INT_MAX));
      MPI_Request req;
      std::unique_lock<std::mutex> lock(mpi_);
      const int e = MPI_Ibcast(p + done, n, MPI_BYTE, root, MPI_COMM_WORLD, &req);
      lock.unlock();
      if (e != MPI_SUCCESS) return Status::error(mpiError("broadcast", e));
      DW_RETURN_IF_ERROR(wait(req, "broadcast"));
      done += n;
    }
    return Status();
  }
  Status barrier() override {
    MPI_Request req;
    std::unique_lock<std::mutex> lock(mpi_);
    const int e = MPI_Ibarrier(MPI_COMM_WORLD, &req);
    lock.unlock();
    if (e != MPI_SUCCESS) return Status::error(mpiError("barrier", e));
    return wait(req, "barrier");
  }
  Status startSum(float* data, int64_t count) override {
    if (count > INT_MAX) return Status::error("a gradient bucket of over 2^31 values");
    MPI_Request req;
    {
      std::lock_guard<std::mutex> lock(mpi_);
      if (int e = MPI_Iallreduce(MPI_IN_PLACE, data, static_cast<int>(count), MPI_FLOAT, MPI_SUM,
                                 MPI_COMM_WORLD, &req);
          e != MPI_SUCCESS)
        return Status::error(mpiError("allreduce", e));
      pending_.push_back(req);
    }
    started_.notify_one();
    return Status();
  }
  Status progress() override {
    // The progress thread polls only every kPollInterval, and when the computing threads hold
    // every core it waits for the scheduler too; a test between two nodes moves the sums along
    // at once. Where the thread is inside MPI already this one has nothing to add.
    std::unique_lock<std::mutex> lock(mpi_, std::try_to_lock);
    if (!lock.owns_lock()) return Status();
    DW_RETURN_IF_ERROR(threadStatus_);
    return testFirst();
  }
  Status finishSums() override {
    using Clock = std::chrono::steady_clock;
    const auto start = Clock::now();
    for (int polls = 0;; ++polls) {
      {
        std::lock_guard<std::mutex> lock(mpi_);
        DW_RETURN_IF_ERROR(threadStatus_);
        if (pending_.empty()) break;
        DW_RETURN_IF_ERROR(testFirst());
        if (pending_.empty()) break;
      }
      DW_RETURN_IF_ERROR(pause(Clock::now() - start, polls, "gradient sum"));
    }
    waited_ += std::chrono::duration<double>(Clock::now() - start).count();
    return Status();
  }
  [[noreturn]] void abort(int code) override {
    // The progress thread holds the lock only inside a test, so this waits microseconds.
    std::lock_guard<std::mutex> lock(mpi_);
    MPI_Abort(MPI_COMM_WORLD, code);
    std::_Exit(code);  // MPI_Abort does not return; this keeps [[noreturn]] true if it did
  }
  double waitSeconds() const override { return waited_; }

 private:
  // MPI counts are ints: large buffers go in chunks.
  Status reduce(void* data, int64_t count, MPI_Datatype type, size_t elem, const char* what) {
    auto* p = static_cast<char*>(data);
    for (int64_t done = 0; done < count;) {
      const int n = static_cast<int>(std::min<int64_t>(count - done, INT_MAX / 8));
      MPI_Request req;
      std::unique_lock<std::mutex> lock(mpi_);
      const int e = MPI_Iallreduce(MPI_IN_PLACE, p + done * static_cast<int64_t>(elem), n, type,
                                   MPI_SUM, MPI_COMM_WORLD, &req);
      lock.unlock();
      if (e != MPI_SUCCESS) return Status::error(mpiError("allreduce", e));
      DW_RETURN_IF_ERROR(wait(req, what));
      done += n;
    }
    return Status();
  }

  // Completes a non-blocking collective, or gives up after the timeout: MPI's blocking calls
  // would wait forever for a process that stopped.
  Status wait(MPI_Request& req, const char* what) {
    using Clock = std::chrono::steady_clock;
    const auto start = Clock::now();
    for (int polls = 0;; ++polls) {
      int done = 0;
      std::unique_lock<std::mutex> lock(mpi_);
      const int e = MPI_Test(&req, &done, MPI_STATUS_IGNORE);
      lock.unlock();
      if (e != MPI_SUCCESS) return Status::error(mpiError(what, e));
      if (done) {
        waited_ += std::chrono::duration<double>(Clock::now() - start).count();
        return Status();
      }
      DW_RETURN_IF_ERROR(pause(Clock::now() - start, polls, what));
    }
  }

  // Between two polls of a wait that started `waited` ago: an error past the timeout, else a
  // pause fitting the wait. A long wait answers the other processes' probes (probeSilent):
  // they probe after their own timeout, when this one has waited as long.
  Status pause(std::chrono::steady_clock::duration waited, int polls, const char* what) {
    using Clock = std::chrono::steady_clock;
    const auto now = Clock::now();
    // A gap between two polls of one wait, which pause for 200 us at most, means this process
    // itself did not run (SIGSTOP, a debugger, a starved machine): when it wakes past the
    // timeout, the others are not to blame.
    const double gap = polls > 0 ? std::chrono::duration<double>(now - lastPoll_).count() : 0.0;
    lastPoll_ = now;
    const double seconds = std::chrono::duration<double>(waited).count();
    if (seconds > timeout_) {
      const std::string limit = " (--distributed-timeout sets this limit)";
      if (gap > 1.0)
        return Status::error("this process stood still for " + std::to_string(int(gap + 0.5)) +
                             " s (stopped, or starved of the processor) in the " + what +
                             ", and the others gave up on it after " +
                             std::to_string(static_cast<int>(timeout_)) + " s" + limit);
      const std::vector<int> silent = probeSilent();
      std::string who;
      for (int r : silent)
        who += (who.empty() ? "" : ", ") + std::string("rank ") + std::to_string(r) + " on " +
               hosts_[static_cast<size_t>(r)];
      if (!who.empty())
        return Status::error(std::string("the ") + what + " did not complete within " +
                             std::to_string(static_cast<int>(timeout_)) + " s, and " + who +
                             (silent.size() > 1 ? " do" : " does") +
                             " not answer: stopped, hung, lost its connection or still computing" +
                             limit);
      return Status::error(std::string("the ") + what + " did not complete within " +
                           std::to_string(static_cast<int>(timeout_)) +
                           " s although every process answers: they are out of step (a "
                           "process that left the run's loop, or a different run)" +
                           limit);
    }
    // MPI moves a message along only inside its calls, so a long message needs frequent
    // polls; yielding lets another process sharing the core compute meanwhile. A wait of
    // seconds (the others are still computing, or something is wrong) polls more gently.
    if (seconds > 0.5) {
      {
        std::lock_guard<std::mutex> lock(mpi_);
        answerProbes();
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    } else if (polls > 2000)
      std::this_thread::yield();
    return Status();
  }

  // Probes on probes_: a waiting process answers them between its polls, so after a timeout
  // the processes that do not answer within kProbeWait are the ones to name. Holding mpi_.
  static constexpr int kProbeTag = 1, kAnswerTag = 2;
  void answerProbes() {
    static const int kOne = 1;
    for (;;) {
      int flag = 0;
      MPI_Status st;
      if (MPI_Iprobe(MPI_ANY_SOURCE, kProbeTag, probes_, &flag, &st) != MPI_SUCCESS || !flag)
        return;
      int v = 0;
      MPI_Recv(&v, 1, MPI_INT, st.MPI_SOURCE, kProbeTag, probes_, MPI_STATUS_IGNORE);
      MPI_Request r;
      if (MPI_Isend(&kOne, 1, MPI_INT, st.MPI_SOURCE, kAnswerTag, probes_, &r) == MPI_SUCCESS)
        MPI_Request_free(&r);
    }
  }
  std::vector<int> probeSilent() {
    using Clock = std::chrono::steady_clock;
    static const int kOne = 1;
    const auto kProbeWait = std::chrono::milliseconds(std::min(3000, int(timeout_ * 500) + 1));
    std::vector<int> answers(static_cast<size_t>(size_), 0);
    std::vector<MPI_Request> recvs(static_cast<size_t>(size_), MPI_REQUEST_NULL);
    std::unique_lock<std::mutex> lock(mpi_);
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      MPI_Irecv(&answers[static_cast<size_t>(r)], 1, MPI_INT, r, kAnswerTag, probes_,
                &recvs[static_cast<size_t>(r)]);
      MPI_Request s;
      if (MPI_Isend(&kOne, 1, MPI_INT, r, kProbeTag, probes_, &s) == MPI_SUCCESS)
        MPI_Request_free(&s);
    }
    std::vector<int> silent;
    const auto deadline = Clock::now() + kProbeWait;
    for (;;) {
      answerProbes();
      silent.clear();
      for (int r = 0; r < size_; ++r) {
        MPI_Request& q = recvs[static_cast<size_t>(r)];
        if (q == MPI_REQUEST_NULL) continue;
        int done = 0;
        MPI_Test(&q, &done, MPI_STATUS_IGNORE);
        if (!done) silent.push_back(r);
      }
      if (silent.empty() || Clock::now() > deadline) break;
      lock.unlock();
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      lock.lock();
    }
    for (int r : silent) {
      MPI_Cancel(&recvs[static_cast<size_t>(r)]);
      MPI_Request_free(&recvs[static_cast<size_t>(r)]);
    }
    return silent;
  }

  // Tests the first started sum, which drives MPI's progress for all of them. Holding mpi_.
  Status testFirst() {
    if (pending_.empty()) return Status();
    int flag = 0;
    if (int e = MPI_Test(&pending_.front(), &flag, MPI_STATUS_IGNORE); e != MPI_SUCCESS)
      return Status::error(mpiError("gradient sum", e));
    if (flag) pending_.erase(pending_.begin());
    return Status();
  }

  // The progress thread. Open MPI moves a message only inside an MPI call, so without it a sum
  // stands still while a long node runs (the backward convolutions of a large batch); polled
  // every kPollInterval it keeps moving, for a few microseconds of a core per poll. Between
  // nodes the training thread tests too (progress()), so this is the backstop for long nodes:
  // at 50 us its wake-ups took the cores from the computation (CNN, 2 processes on 2 cores:
  // 1.66 s an epoch against 1.59 at 500 us, with the same sums' wait).
  void driveSums() {
    constexpr auto kPollInterval = std::chrono::microseconds(500);
    std::unique_lock<std::mutex> lock(mpi_);
    while (!stop_) {
      if (pending_.empty() || !threadStatus_.ok()) {
        started_.wait(lock);
        continue;
      }
      const size_t before = pending_.size();
      threadStatus_ = testFirst();
      if (pending_.size() < before) continue;  // the next sum may be done too
      lock.unlock();
      std::this_thread::sleep_for(kPollInterval);
      lock.lock();
    }
  }

  double timeout_;
  double waited_ = 0;
  MPI_Comm probes_ = MPI_COMM_NULL;                 // a duplicate of the world for probeSilent
  std::chrono::steady_clock::time_point lastPoll_;  // pause's previous call
  // Every MPI call after construction holds mpi_ (MPI_THREAD_SERIALIZED: one call at a time).
  std::mutex mpi_;
  std::condition_variable started_;  // a sum was started, or stop_
  std::thread progress_;             // driveSums, where MPI allows it
  bool stop_ = false;
  Status threadStatus_;               // the progress thread's error, reported by the main thread
  std::vector<MPI_Request> pending_;  // started sums (startSum), in order
  int rank_ = 0, size_ = 1;
  std::vector<std::string> hosts_;
};

}  // namespace

bool mpiBuilt() {
  return true;
}

Result<std::shared_ptr<Communicator>> mpiCommunicator(double timeoutSeconds) {
  static std::shared_ptr<Communicator> world;
  if (world) return world;
  int initialized = 0;
  MPI_Initialized(&initialized);
  int provided = 0;
  if (!initialized) {
    if (int e = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
        e != MPI_SUCCESS)
      return Status::error(mpiError("initialization", e));
    // Errors come back as codes, so a failure becomes a deepwire error rather than an abort.
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    std::atexit([] {
      int finalized = 0;
      MPI_Finalized(&finalized);
      if (!finalized) MPI_Finalize();
    });
  } else
    MPI_Query_thread(&provided);
  world = std::make_shared<Mpi>(timeoutSeconds, provided >= MPI_THREAD_SERIALIZED);
  return world;
}

}  // namespace dw::engine::distributed
