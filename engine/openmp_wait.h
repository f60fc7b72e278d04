// How long an OpenMP thread with no work spins before it sleeps, for deepwire's programs.
//
// libgomp's default lets an idle thread spin for about 3 ms at every barrier. Next to another
// job on the same cores (a second training run, a build), the spinning thread holds a core the
// thread it waits for needs, and every parallel region can cost a time slice: the MLP example's
// epoch took 13 s instead of 1.2 while the CNN trained beside it, and ShuffleNet's runs averaged
// 17 ms instead of 1.5. 1000 spins, what libgomp itself uses for a team larger than the cores,
// measured the same as the default on an idle machine (inference of three zoo models, the CNN's
// training on 1 and 2 threads) and gave those 1.2 s and 6.6 ms. A user's own OMP_WAIT_POLICY or
// GOMP_SPINCOUNT wins.
#pragma once

#include <unistd.h>

#include <cstdlib>

namespace dw {

inline constexpr const char* kOpenMpSpinCount = "1000";

// Call first in main. libgomp reads GOMP_SPINCOUNT when it loads, before main, and an ELF
// preinit function runs too early (libc's start-up puts back the environment it was given), so
// the program starts itself once more with the setting; where that fails it runs on as it is.
inline void useShortOpenMpSpin(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") || std::getenv("GOMP_SPINCOUNT")) return;
  if (setenv("GOMP_SPINCOUNT", kOpenMpSpinCount, 1) != 0) return;
  execv("/proc/self/exe", argv);
}

}  // namespace dw
