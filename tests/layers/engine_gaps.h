// Ops that deepwire nodes lower to but the engine cannot run yet (engine kernels are the engine
// helper's work). A test stopped only by one of these skips with that reason, loudly, instead of
// hiding the case; once the kernel exists the test runs and must pass like every other.
#pragma once

#include <string>

namespace dw::test {

inline const char* const kAwaitingEngineKernels[] = {"RandomUniform", "RandomNormal"};

// The op a session-creation error blames, when it is one the engine is known to lack; "" else.
inline std::string awaitedKernel(const std::string& sessionError) {
  for (const char* op : kAwaitingEngineKernels)
    if (sessionError.find("unsupported op " + std::string(op) + " ") != std::string::npos)
      return op;
  return "";
}

}  // namespace dw::test
