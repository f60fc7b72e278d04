// How long an OpenMP thread with no work spins before it sleeps, for deepwire's programs.
//
// libgomp reads GOMP_SPINCOUNT when it loads, before main. Its default lets an idle thread spin
// for milliseconds at every barrier. On a machine whose cores something else is using (a second
// training run, a build), the spinning thread holds a core the thread it waits for needs, and
// every parallel region can cost a time slice: ShuffleNet at batch 1 went from 2 ms to 50 ms a
// run on average, some runs 900 ms, next to another deepwire job. A short spin keeps the fast
// hand-over between regions of an idle machine and sleeps soon enough under contention. A user's
// own OMP_WAIT_POLICY or GOMP_SPINCOUNT wins.
//
// Include this in a program's main.cpp only and put DW_OPENMP_WAIT_BEFORE_LIBRARIES there: the
// ELF .preinit_array of an executable runs before any shared library's initializers, libgomp's
// included, which a call from main would be too late for.
#pragma once

#include <cstdlib>

namespace dw::detail {

inline constexpr const char* kOpenMpSpinCount = "10000";

inline void setOpenMpWait(int, char**, char**) {
  if (std::getenv("OMP_WAIT_POLICY") || std::getenv("GOMP_SPINCOUNT")) return;
  setenv("GOMP_SPINCOUNT", kOpenMpSpinCount, 0);
}

}  // namespace dw::detail

#define DW_OPENMP_WAIT_BEFORE_LIBRARIES                                                   \
  __attribute__((section(".preinit_array"), used)) static void (*const dwOpenMpWaitInit)( \
      int, char**, char**) = &dw::detail::setOpenMpWait
