// The libFuzzer entry points of one target executable; DW_FUZZ_TARGET names the target (CMake
// compiles this file once per target).
#include <cstdio>
#include <cstdlib>

#include "fuzz/targets.h"

namespace {
dw::fuzz::TargetFn target = nullptr;
}

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  dw::fuzz::initialize();
  const auto* t = dw::fuzz::findTarget(DW_FUZZ_TARGET);
  if (!t) {
    std::fprintf(stderr, "no fuzz target '%s'\n", DW_FUZZ_TARGET);
    std::abort();
  }
  target = t->fn;
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return target(data, size);
}
