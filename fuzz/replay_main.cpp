// fuzz_replay TARGET FILE|DIR...: runs a fuzz target once over each file (a directory: every
// file in it, sorted), as libFuzzer would, and says which file it was on. Built with the normal
// compiler; CTest replays the seeds and the regression corpus with it, so an input that once
// crashed keeps being checked without clang.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include "fuzz/targets.h"

namespace fs = std::filesystem;

int main(int argc, char** argv) {
  if (argc < 3) {
    std::cerr << "usage: fuzz_replay TARGET FILE|DIR...\ntargets:";
    for (const auto& t : dw::fuzz::targets()) std::cerr << " " << t.name;
    std::cerr << "\n";
    return 2;
  }
  const auto* target = dw::fuzz::findTarget(argv[1]);
  if (!target) {
    std::cerr << "fuzz_replay: no target '" << argv[1] << "'\n";
    return 2;
  }
  dw::fuzz::initialize();
  std::vector<fs::path> files;
  for (int i = 2; i < argc; ++i) {
    std::error_code ec;
    if (fs::is_directory(argv[i], ec)) {
      std::vector<fs::path> in;
      for (const auto& e : fs::recursive_directory_iterator(argv[i]))
        if (e.is_regular_file()) in.push_back(e.path());
      std::sort(in.begin(), in.end());
      files.insert(files.end(), in.begin(), in.end());
    } else if (fs::exists(argv[i], ec)) {
      files.emplace_back(argv[i]);
    } else {
      std::cerr << "fuzz_replay: " << argv[i] << " does not exist\n";
      return 2;
    }
  }
  for (const auto& f : files) {
    // Named before the run: if the target crashes, the last line printed is the culprit.
    std::cerr << "replaying " << f.string() << "\n";
    std::ifstream in(f, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    target->fn(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  }
  std::cerr << "fuzz_replay " << argv[1] << ": " << files.size() << " inputs, no crash\n";
  return 0;
}
