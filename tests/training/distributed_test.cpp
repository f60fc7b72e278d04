// Data-parallel training through the CLI as people run it: `mpirun -np N deepwire train ...
// --distributed`, against one process training on the whole batch. Processes talk over TCP on
// loopback only. Skipped where the build has no MPI or no mpirun.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "engine/distributed/communicator.h"
#include "engine/tensor.h"
#include "engine/training/trainer.h"
#include "graphs/file_io.h"

namespace fs = std::filesystem;
using namespace dw::engine;

namespace {

const std::string kCli = DW_CLI_PATH;
const std::string kCnn =
    std::string(DW_SOURCE_DIR) + "/resources/examples/fashion_mnist_cnn.dwproj";
const std::string kMlp =
    std::string(DW_SOURCE_DIR) + "/resources/examples/fashion_mnist_mlp.dwproj";

struct Shell {
  int code;
  std::string output;
};

Shell shell(const std::string& cmd) {
  Shell r{-1, ""};
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return r;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, p)) r.output.append(buf, n);
  const int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

std::string mpirun(int processes) {
  // As root (CI), more processes than cores, TCP on loopback only, and a bound on the whole run.
  return "timeout 120 mpirun --allow-run-as-root --oversubscribe -np " + std::to_string(processes) +
         " --mca btl self,vader,tcp --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo ";
}

std::map<std::string, Tensor> initializers(const std::string& path) {
  std::map<std::string, Tensor> out;
  auto m = dw::readOnnxFile(path);
  EXPECT_TRUE(m.ok()) << m.message();
  if (!m.ok()) return out;
  for (const auto& t : m->graph().initializer()) {
    auto v = tensorFromProto(t);
    if (v.ok() && v->dtype() == DType::kFloat) out.emplace(t.name(), std::move(v.value()));
  }
  return out;
}

// Every float initializer of `got` within `tolerance` of `want`'s.
void expectSameWeights(const std::string& want, const std::string& got, double tolerance,
                       const std::string& what) {
  const auto w = initializers(want), g = initializers(got);
  ASSERT_FALSE(w.empty());
  ASSERT_EQ(g.size(), w.size()) << what;
  for (const auto& [name, t] : w) {
    ASSERT_EQ(g.at(name).shape(), t.shape()) << what << ": " << name;
    for (int64_t i = 0; i < t.size(); ++i)
      ASSERT_NEAR(g.at(name).data<float>()[i], t.data<float>()[i], tolerance)
          << what << ": " << name << "[" << i << "]";
  }
}

class Distributed : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!distributed::mpiBuilt()) GTEST_SKIP() << "built without MPI";
    if (shell("command -v mpirun").code != 0) GTEST_SKIP() << "no mpirun";
    dir_ = fs::temp_directory_path() / ("dw_distributed_" + std::to_string(getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }
  // 1000 samples in batches of 64: 15 full batches and one of 40, split unevenly by 3.
  std::string train(const std::string& optimizer, const std::string& out, int epochs = 1) const {
    return kCli + " train " + kMlp + " --epochs " + std::to_string(epochs) +
           " --train-limit 1000 --batch-size 64 --threads 1" +
           " --quiet --no-data-conversion --optimizer " + optimizer + " --export-onnx " +
           (dir_ / out).string();
  }
  // `project` (an edited MLP example) trained by one process and by three, with `flags`, to the
  // same weights.
  void expectThreeTrainAsOne(const nlohmann::json& project, const std::string& flags,
                             const std::string& what) {
    const fs::path file = dir_ / "edited.dwproj";
    std::ofstream(file) << project.dump();
    auto run = [&](const std::string& launch, const std::string& out) {
      return shell(launch + kCli + " train " + file.string() +
                   " --epochs 1 --train-limit 640 --batch-size 64 --threads 1 --quiet"
                   " --no-data-conversion --optimizer sgd --export-onnx " +
                   (dir_ / out).string() + " " + flags + (launch.empty() ? "" : " --distributed"));
    };
    Shell one = run("", "one.onnx");
    ASSERT_EQ(one.code, 0) << one.output;
    Shell three = run(mpirun(3), "three.onnx");
    ASSERT_EQ(three.code, 0) << three.output;
    expectSameWeights((dir_ / "one.onnx").string(), (dir_ / "three.onnx").string(), 1e-5, what);
  }
  fs::path dir_;
};

}  // namespace

// 1 process on the global batch of 64 against 2, 3 and 4 processes on their slices: the same
// weights within float32 rounding of the summed gradients (the sum runs in another order).
TEST_F(Distributed, RanksTrainAsOneProcess) {
  for (const std::string opt : {"sgd", "adam"}) {
    Shell one = shell(train(opt, "one.onnx"));
    ASSERT_EQ(one.code, 0) << one.output;
    const auto want = initializers((dir_ / "one.onnx").string());
    ASSERT_FALSE(want.empty());
    for (int n : {2, 3, 4}) {
      // Buckets of 64 KiB: the gradients are summed in several pieces, the first ones while
      // the backward pass still runs.
      Shell many = shell(mpirun(n) + train(opt, "many.onnx") + " --distributed" +
                         (n == 3 ? " --bucket-mb 0.0625" : ""));
      ASSERT_EQ(many.code, 0) << many.output;
      EXPECT_NE(many.output.find("distributed: " + std::to_string(n) + " processes"),
                std::string::npos)
          << many.output;
      // Rank 0 alone reports.
      size_t epochs = 0;
      for (size_t at = many.output.find("epoch 1/1"); at != std::string::npos;
           at = many.output.find("epoch 1/1", at + 1))
        ++epochs;
      EXPECT_EQ(epochs, 1u) << many.output;
      const auto got = initializers((dir_ / "many.onnx").string());
      ASSERT_EQ(got.size(), want.size());
      for (const auto& [name, w] : want) {
        const Tensor& g = got.at(name);
        ASSERT_EQ(g.shape(), w.shape()) << name;
        double scale = 0;
        for (int64_t i = 0; i < w.size(); ++i)
          scale = std::max(scale, double(std::fabs(w.data<float>()[i])));
        const double tol = (opt == "sgd" ? 1e-6 : 1e-4) * std::max(scale, 1e-3);
        for (int64_t i = 0; i < w.size(); ++i)
          ASSERT_NEAR(g.data<float>()[i], w.data<float>()[i], tol)
              << opt << ", " << n << " processes: " << name << "[" << i << "]";
      }
    }
  }
}

// Dropout draws per sample (from the seed, the step and the sample's place in the global batch),
// so the processes together drop what one process drops: the MLP with a Dropout layer after its
// first hidden layer trains to the same weights on 1 and 3 processes.
TEST_F(Distributed, DropoutDrawsPerSample) {
  std::ifstream in(kMlp);
  nlohmann::json project = nlohmann::json::parse(in);
  // relu1 (node 6) -> fc2 (node 9) becomes relu1 -> Dropout (node 17) -> fc2.
  bool relinked = false;
  for (auto& l : project["links"])
    if (l["from"] == nlohmann::json::array({6, 0}) && l["to"] == nlohmann::json::array({9, 0})) {
      l["to"] = nlohmann::json::array({17, 0});
      relinked = true;
    }
  ASSERT_TRUE(relinked) << "the example's relu1 -> fc2 link moved";
  project["links"].push_back({{"from", {17, 0}}, {"to", {9, 0}}});
  project["nodes"].push_back({{"id", 17},
                              {"domain", "deepwire.layers"},
                              {"type", "Dropout"},
                              {"position", {800.0, 0.0}},
                              {"name", "drop"},
                              {"params", {{"rate", 0.3}, {"seed", 7}}}});
  expectThreeTrainAsOne(project, "", "3 processes, Dropout");
}

// A loss that sums over the batch (reduction sum) is added up across processes as it is, not
// weighted by each process's share: 1 and 3 processes train the MLP to the same weights.
TEST_F(Distributed, SummedLossesAddUp) {
  std::ifstream in(kMlp);
  nlohmann::json project = nlohmann::json::parse(in);
  bool set = false;
  for (auto& n : project["nodes"])
    if (n["type"] == "Output Train") {
      n["params"]["reduction"] = "sum";
      set = true;
    }
  ASSERT_TRUE(set) << "the example has no Output Train node";
  expectThreeTrainAsOne(project, "--lr 0.0005", "3 processes, summed loss");
}

// The CNN example (two Conv + BatchNormalization + Relu + MaxPool blocks) with
// --sync-batchnorm: 2 and 3 processes normalize with the whole batch's statistics and end within
// 1e-4 of one process's weights (of each tensor's largest value, or of 0.1 where that is smaller:
// biases of 3e-3 after 16 steps differ by float32 rounding of the sums' order, 1e-6). The one
// process runs with the flag too, which plans the same unfused normalization kernels. Without
// the flag each process normalizes its own slice, and the weights drift apart.
TEST_F(Distributed, SynchronizedBatchNormalization) {
  auto run = [&](const std::string& launch, const std::string& flags, const std::string& out) {
    return shell(launch + kCli + " train " + kCnn +
                 " --epochs 1 --train-limit 1000 --batch-size 64 --threads 1 --quiet"
                 " --no-data-conversion --optimizer sgd --export-onnx " +
                 (dir_ / out).string() + " " + flags);
  };
  Shell one = run("", "--sync-batchnorm", "one.onnx");
  ASSERT_EQ(one.code, 0) << one.output;
  const auto want = initializers((dir_ / "one.onnx").string());
  auto worst = [&](const std::string& file) {
    const auto got = initializers((dir_ / file).string());
    double w = 0;
    for (const auto& [name, t] : want) {
      double scale = 0.1, diff = 0;
      for (int64_t i = 0; i < t.size(); ++i) {
        scale = std::max(scale, double(std::fabs(t.data<float>()[i])));
        diff =
            std::max(diff, double(std::fabs(got.at(name).data<float>()[i] - t.data<float>()[i])));
      }
      w = std::max(w, diff / scale);
    }
    return w;
  };
  for (int n : {2, 3}) {
    Shell synced = run(mpirun(n), "--distributed --sync-batchnorm", "synced.onnx");
    ASSERT_EQ(synced.code, 0) << synced.output;
    EXPECT_LT(worst("synced.onnx"), 1e-4) << n << " processes";
  }
  Shell apart = run(mpirun(2), "--distributed", "apart.onnx");
  ASSERT_EQ(apart.code, 0) << apart.output;
  EXPECT_GT(worst("apart.onnx"), 1e-2) << "per-process statistics should differ";
}

// Resuming a 2-process checkpoint on 3 processes, and on 1, continues as one process would
// have trained both epochs.
TEST_F(Distributed, ResumeWithAnotherProcessCount) {
  Shell one = shell(train("sgd", "one.onnx", 2));
  ASSERT_EQ(one.code, 0) << one.output;
  const std::string ckpt = (dir_ / "ckpt").string();
  Shell first =
      shell(mpirun(2) + train("sgd", "first.onnx") + " --distributed --checkpoint " + ckpt);
  ASSERT_EQ(first.code, 0) << first.output;
  for (const std::string& launch : {mpirun(3), std::string()}) {
    Shell resumed = shell(launch + train("sgd", "resumed.onnx", 2) + " --resume " + ckpt +
                          (launch.empty() ? "" : " --distributed"));
    ASSERT_EQ(resumed.code, 0) << resumed.output;
    // Once, from rank 0: where it resumes from and how far the checkpoint had come.
    const std::string said = "deepwire: resuming from " + ckpt + ": ";
    const size_t at = resumed.output.find(said);
    EXPECT_NE(at, std::string::npos) << resumed.output;
    EXPECT_EQ(resumed.output.find(said, at + 1), std::string::npos) << resumed.output;
    expectSameWeights((dir_ / "one.onnx").string(), (dir_ / "resumed.onnx").string(), 1e-5,
                      launch.empty() ? "1 process" : "3 processes");
  }
}

// A process killed, or stopped, in the middle of training ends the whole job within a minute
// with an error that says what happened and which process, instead of leaving the others
// waiting.
TEST_F(Distributed, LostProcessEndsTheJob) {
  for (const std::string signal : {"KILL", "STOP"}) {
    const std::string marker = (dir_ / ("lost_" + signal + ".onnx")).string();
    // Rank 1 is found by its command line and the rank variable mpirun gives it, 3 s into
    // training (through /proc, so that no procps is needed).
    const fs::path script = dir_ / "lose_a_process.sh";
    std::ofstream(script) << mpirun(2) << kCli << " train " << kCnn
                          << " --epochs 5 --train-limit 20000 --threads 1 --quiet --distributed"
                          << " --distributed-timeout 5 --export-onnx " << marker << " &\n"
                          << "job=$!\nsleep 3\n"
                          << "for d in /proc/[0-9]*; do\n"
                          << "  tr '\\0' '\\n' < $d/cmdline 2>/dev/null | grep -qxF " << marker
                          << " || continue\n"
                          << "  if tr '\\0' '\\n' < $d/environ 2>/dev/null |"
                          << " grep -qx OMPI_COMM_WORLD_RANK=1; then kill -" << signal
                          << " ${d#/proc/}; fi\ndone\nwait $job\n";
    const auto start = std::chrono::steady_clock::now();
    Shell r = shell("bash " + script.string());
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_NE(r.code, 0) << signal << ": " << r.output;
    EXPECT_LT(seconds, 60) << signal << ": " << r.output;
    if (signal == "KILL")
      EXPECT_NE(r.output.find("exited on signal 9"), std::string::npos) << r.output;
    else
      // The stopped process is named: the others probe each other after the timeout, and it
      // alone does not answer.
      EXPECT_TRUE(r.output.find("did not complete within 5 s, and rank 1 on ") !=
                      std::string::npos &&
                  r.output.find(" does not answer: stopped, hung") != std::string::npos)
          << r.output;
    EXPECT_FALSE(fs::exists(marker)) << signal << ": the job went on to export";
  }
}

// Two "machines": network namespaces joined by a veth pair, each with its own host name, and
// mpirun starting the remote process through an rsh agent that enters the other namespace. The
// processes share no memory transport (btl self,tcp), so the gradients cross the veth link as
// they would cross a network. Skipped where namespaces cannot be made (no CAP_NET_ADMIN).
TEST_F(Distributed, TrainsAcrossANetwork) {
  const std::string a = "dwA" + std::to_string(getpid()), b = "dwB" + std::to_string(getpid());
  const std::string va = "va" + std::to_string(getpid() % 100000),
                    vb = "vb" + std::to_string(getpid() % 100000);
  if (shell("ip netns add " + a).code != 0) GTEST_SKIP() << "cannot create network namespaces";
  struct Cleanup {
    std::string a, b;
    ~Cleanup() {
      shell("ip netns del " + a);
      shell("ip netns del " + b);
    }
  } cleanup{a, b};
  const std::string setup =
      "set -e\nip netns add " + b + "\nip link add " + va + " type veth peer name " + vb +
      "\nip link set " + va + " netns " + a + "\nip link set " + vb + " netns " + b +
      "\nip netns exec " + a + " ip addr add 10.77.0.1/24 dev " + va + "\nip netns exec " + b +
      " ip addr add 10.77.0.2/24 dev " + vb + "\nfor n in " + a + " " + b +
      "; do ip netns exec $n ip link set lo up; done\nip netns exec " + a + " ip link set " + va +
      " up\nip netns exec " + b + " ip link set " + vb + " up\n";
  std::ofstream(dir_ / "setup.sh") << setup;
  Shell made = shell("bash " + (dir_ / "setup.sh").string());
  ASSERT_EQ(made.code, 0) << made.output;
  // The rsh agent: "agent HOST command..." runs the command in HOST's namespace and name.
  std::ofstream(dir_ / "agent.sh") << "#!/bin/bash\nhost=$1; shift\ncase $host in\n"
                                   << "  10.77.0.1) ns=" << a << "; name=nodeA ;;\n"
                                   << "  10.77.0.2) ns=" << b << "; name=nodeB ;;\n"
                                   << "  *) echo \"unknown host $host\" >&2; exit 1 ;;\nesac\n"
                                   << "exec ip netns exec $ns unshare --uts bash -c "
                                   << "\"hostname $name; $*\"\n";
  fs::permissions(dir_ / "agent.sh", fs::perms::owner_all);
  Shell one = shell(train("sgd", "one.onnx"));
  ASSERT_EQ(one.code, 0) << one.output;
  std::ofstream(dir_ / "run.sh")
      << "hostname nodeA\ntimeout 120 mpirun --allow-run-as-root -np 2 --host "
      << "10.77.0.1:1,10.77.0.2:1 --mca plm_rsh_agent " << (dir_ / "agent.sh").string()
      << " --mca btl self,tcp --mca btl_tcp_if_include 10.77.0.0/24"
      << " --mca oob_tcp_if_include 10.77.0.0/24 " << train("sgd", "net.onnx")
      << " --distributed\n";
  Shell net = shell("ip netns exec " + a + " unshare --uts bash " + (dir_ / "run.sh").string());
  ASSERT_EQ(net.code, 0) << net.output;
  EXPECT_NE(net.output.find("rank 0 on nodeA, rank 1 on nodeB"), std::string::npos) << net.output;
  expectSameWeights((dir_ / "one.onnx").string(), (dir_ / "net.onnx").string(), 1e-6,
                    "across the network");
}

// SIGUSR1 to mpirun (which passes it on to every process at once) stops every process after the
// same step, rank 0 saves the checkpoint, and training resumes from it. (Ctrl-C reaches the
// processes as SIGTERM only when mpirun's kill timeout runs out, just before its SIGKILL: on a
// loaded machine one run in ten lost the checkpoint that way.)
TEST_F(Distributed, InterruptSavesACheckpoint) {
  const std::string ckpt = (dir_ / "ckpt").string();
  const fs::path script = dir_ / "interrupt.sh";
  // The interrupt goes once the run has said it started (its handlers are in place by then),
  // and a second later: a fixed wait was too short for a sanitizer build's start-up. It goes to
  // mpirun (the child of `timeout`), as Ctrl-C would: sent to `timeout`, it reached mpirun twice
  // (timeout passes it on to its child and to its process group), and a second Ctrl-C makes
  // mpirun kill the job at once, before anything is saved (about half the runs failed so).
  const std::string log = (dir_ / "interrupt.log").string();
  std::ofstream(script)
      << mpirun(2) << kCli << " train " << kCnn
      << " --epochs 5 --train-limit 20000 --threads 1 --quiet --distributed"
      << " --checkpoint " << ckpt << " 2> " << log << " &\njob=$!\n"
      << "for i in $(seq 600); do grep -q 'distributed:' " << log
      << " && break; sleep 0.2; done\nsleep 1\nkill -USR1 $(pgrep -P $job)\nwait $job\n"
      << "echo \"job exit $?\"\ncat " << log << " >&2\n";
  Shell r = shell("bash " + script.string());
  EXPECT_NE(r.output.find("interrupted; checkpoint saved to"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("MPI_ABORT"), std::string::npos) << r.output;
  // A stop asked for: the processes exit 0, so mpirun ends with them instead of taking a
  // failed process's job down (SIGCONT, SIGTERM, SIGKILL a second apart).
  EXPECT_NE(r.output.find("job exit 0"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("non-zero"), std::string::npos) << r.output;
  ASSERT_TRUE(fs::exists(fs::path(ckpt) / "checkpoint.json")) << r.output;
  Shell resumed = shell(mpirun(2) + kCli + " train " + kCnn +
                        " --epochs 1 --train-limit 20000 --threads 1 --quiet --distributed"
                        " --resume " +
                        ckpt);
  EXPECT_EQ(resumed.code, 0) << resumed.output;
}

// --distributed without a launcher is a world of one process; a batch smaller than the
// process count is refused with the fix.
TEST_F(Distributed, OneProcessAndTooSmallBatches) {
  Shell alone = shell(train("sgd", "alone.onnx") + " --distributed");
  ASSERT_EQ(alone.code, 0) << alone.output;
  EXPECT_NE(alone.output.find("distributed: 1 process"), std::string::npos) << alone.output;
  Shell small =
      shell(mpirun(3) + kCli + " train " + kMlp +
            " --epochs 1 --train-limit 100 --batch-size 2 --threads 1 --quiet --distributed");
  EXPECT_NE(small.code, 0);
  EXPECT_NE(small.output.find("use a batch size of at least the process count"), std::string::npos)
      << small.output;
  // 101 samples in batches of 3 end in a batch of 2: refused before the first step.
  Shell remainder =
      shell(mpirun(3) + kCli + " train " + kMlp +
            " --epochs 1 --train-limit 101 --batch-size 3 --threads 1 --json --json-steps "
            "--distributed");
  EXPECT_NE(remainder.code, 0);
  EXPECT_NE(remainder.output.find("the last batch of every epoch would hold 2 samples"),
            std::string::npos)
      << remainder.output;
  EXPECT_EQ(remainder.output.find("\"step\""), std::string::npos) << remainder.output;
}

// `mpirun -np 2 deepwire train` without --distributed would run two whole trainings writing the
// same files (a user trial did): refused, with the fix.
TEST_F(Distributed, MpirunWithoutDistributedIsRefused) {
  Shell copies = shell(mpirun(2) + kCli + " train " + kMlp +
                       " --epochs 1 --train-limit 100 --threads 1 --quiet");
  EXPECT_NE(copies.code, 0);
  EXPECT_NE(copies.output.find("without --distributed"), std::string::npos) << copies.output;
}

// The wait at the gradient sums, split: until the last process's backward pass ended (skew),
// and after it (the sums). Three processes, two steps: in the first, process 2 ends last, at
// 4.0, and the sums are complete at 4.5 everywhere; in the second, all end at 10.0 and process
// 0's sums are complete at 10.25.
TEST(DistributedWait, SkewAndSumsAreSplitAtTheLastBackwardPass) {
  const std::vector<double> all{1.0, 4.5, 10.0, 10.25,  // process 0
                                3.0, 4.5, 10.0, 10.3,   // process 1
                                4.0, 4.5, 10.0, 10.2};  // process 2
  const auto p0 = training::splitSumWait(all, 3, 0);
  EXPECT_DOUBLE_EQ(p0.skew, 3.0);
  EXPECT_NEAR(p0.sums, 0.5 + 0.25, 1e-12);
  const auto p2 = training::splitSumWait(all, 3, 2);
  EXPECT_DOUBLE_EQ(p2.skew, 0.0);
  EXPECT_NEAR(p2.sums, 0.5 + 0.2, 1e-12);
  // Sums complete before the last process ended cannot happen in a sum over all of them, but a
  // clock that disagrees must not make either part negative.
  const auto odd = training::splitSumWait({1.0, 2.0, 5.0, 6.0}, 2, 0);
  EXPECT_DOUBLE_EQ(odd.skew, 1.0);
  EXPECT_DOUBLE_EQ(odd.sums, 0.0);
  EXPECT_DOUBLE_EQ(training::splitSumWait(all, 3, 3).sums, 0.0);
}

// A distributed run reports both parts per epoch, and rank 0's summary names them.
TEST_F(Distributed, ReportsTheSumsWaitApartFromTheSkew) {
  Shell two = shell(mpirun(2) + kCli + " train " + kMlp +
                    " --epochs 1 --train-limit 640 --batch-size 64 --threads 1 --json"
                    " --no-data-conversion --distributed");
  ASSERT_EQ(two.code, 0) << two.output;
  std::istringstream lines(two.output);
  int epochs = 0;
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line[0] != '{') continue;
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.contains("waited_seconds")) continue;
    ++epochs;
    ASSERT_TRUE(j.contains("sum_wait_seconds")) << line;
    ASSERT_TRUE(j.contains("skew_wait_seconds")) << line;
    const double sums = j["sum_wait_seconds"], skew = j["skew_wait_seconds"];
    EXPECT_GE(sums, 0.0);
    EXPECT_GE(skew, 0.0);
    EXPECT_LE(sums + skew, j["seconds"].get<double>()) << line;
  }
  EXPECT_EQ(epochs, 1) << two.output;
  EXPECT_NE(two.output.find("for the sums themselves"), std::string::npos) << two.output;
}
