// Small helpers shared by the subcommand files.
#pragma once

#include <iostream>
#include <string>

namespace dw::cli {

// Prints "deepwire: error: ..." on stderr and returns `code` for the process exit status.
inline int fail(const std::string& message, int code = 1) {
  std::cerr << "deepwire: error: " << message << "\n";
  return code;
}

inline std::string humanBytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB"};
  int u = 0;
  while (bytes >= 1024 && u < 3) {
    bytes /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u ? "%.1f %s" : "%.0f %s", bytes, units[u]);
  return buf;
}

}  // namespace dw::cli
