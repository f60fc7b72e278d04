// Fuzz targets (issue 19): each takes one input's bytes and feeds them to the code that opens
// files people bring, the way the CLI and the studio do. A target returns normally whatever the
// bytes are; a crash, a sanitizer report, a hang or an abort() from a broken invariant is a
// finding.
//
// They are built two ways from the same sources:
//   - with clang and libFuzzer (cmake -DDEEPWIRE_FUZZ=ON, scripts/fuzz): one executable per
//     target, fuzz_<name>, coverage-guided;
//   - in every normal build as `fuzz_replay TARGET FILE|DIR...`, which CTest runs over the seed
//     corpus and over tests/fuzz/regressions/<target>/, the inputs that once crashed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace dw::fuzz {

using TargetFn = int (*)(const uint8_t* data, size_t size);

struct Target {
  const char* name;
  TargetFn fn;
  const char* extension;  // of the seed files, for scripts/fuzz's corpus
};

const std::vector<Target>& targets();
const Target* findTarget(const std::string& name);

// Once per process: one thread, no spinning OpenMP workers, quiet logging.
void initialize();

}  // namespace dw::fuzz
