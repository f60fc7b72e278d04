// Small helpers shared by the subcommand files.
#pragma once

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "graphs/graph.h"

namespace dw::cli {

// Which process of a distributed run is speaking ("rank 1 on node2: "), empty otherwise.
inline std::string& failSpeaker() {
  static std::string speaker;
  return speaker;
}

// `text` with every byte that is not part of valid UTF-8 as U+FFFD, and control characters
// other than newline and tab as '?': messages quote names from damaged files, and a terminal or
// a strict reader of the output should not get their raw bytes.
inline std::string printableText(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    for (size_t k = 1; n && k < n; ++k)
      if (i + k >= text.size() || (static_cast<unsigned char>(text[i + k]) & 0xC0) != 0x80) n = 0;
    if (n == 0) {
      out += "\xEF\xBF\xBD";
      ++i;
    } else if (n == 1 && c < 0x20 && c != '\n' && c != '\t') {
      out += '?';
      ++i;
    } else {
      out.append(text, i, n);
      i += n;
    }
  }
  return out;
}

// Prints "deepwire: LINE" on stderr in one write: the processes of an mpirun job share the
// pipe, and a line written in pieces interleaved with another rank's ("deepwire: deepwire:
// accelerator ...\ndistributed: ..."), which hid the studio's cue that a run had started.
inline void note(const std::string& line) {
  std::cerr << ("deepwire: " + line + "\n") << std::flush;
}

// Hints as lines, the nodes given the same advice in one (a trial's MobileNetV2 exported in
// training mode printed the BatchNormalization hint 53 times on every import and train): the
// first node's line, then how many more and which.
inline std::vector<std::string> groupedHints(const std::vector<Problem>& hints) {
  std::vector<std::pair<std::string, std::vector<std::string>>> groups;  // advice, nodes
  for (const auto& h : hints) {
    const size_t colon = h.message.find(": ");
    const std::string who = colon == std::string::npos ? "" : h.message.substr(0, colon);
    const std::string advice =
        colon == std::string::npos ? h.message : h.message.substr(colon + 2);
    auto g = std::find_if(groups.begin(), groups.end(),
                          [&](const auto& e) { return e.first == advice; });
    if (g == groups.end())
      groups.push_back({advice, {who}});
    else
      g->second.push_back(who);
  }
  std::vector<std::string> lines;
  for (const auto& [advice, who] : groups) {
    std::string line = (who[0].empty() ? "" : who[0] + ": ") + advice;
    if (who.size() > 1) {
      line += " (the same for " + std::to_string(who.size() - 1) + " more: ";
      for (size_t i = 1; i < who.size() && i <= 4; ++i) line += (i > 1 ? ", " : "") + who[i];
      line += who.size() > 5 ? ", ...)" : ")";
    }
    lines.push_back(line);
  }
  return lines;
}

// Prints "deepwire: error: ..." on stderr and returns `code` for the process exit status.
inline int fail(const std::string& message, int code = 1) {
  note("error: " + failSpeaker() + printableText(message));
  return code;
}

// JSON text for stdout. Names and messages come from user files, which may hold bytes that are
// not UTF-8: those become U+FFFD instead of aborting the whole output.
inline std::string jsonText(const nlohmann::json& j, int indent = -1) {
  return j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

// CLI11 check of --accelerator: "" when `a` is cpu, gpu, gpu:N or auto (whether that device
// exists here is createBackend's error), else why not.
inline std::string checkAccelerator(const std::string& a) {
  if (a == "cpu" || a == "gpu" || a == "cuda" || a == "auto") return "";
  for (const char* indexed : {"gpu:", "cuda:"}) {
    const size_t n = std::string(indexed).size();
    if (a.rfind(indexed, 0) == 0 && a.size() > n &&
        a.find_first_not_of("0123456789", n) == std::string::npos)
      return "";
  }
  return "'" + a +
         "' is not an accelerator: use cpu, gpu, gpu:N or auto (cuda, cuda:N: NVIDIA GPUs)";
}

// CLI11 checks of a number's range, with messages a person can read (CLI11's PositiveNumber
// prints its range up to DBL_MAX): at least `min`, or (positive) more than 0.
inline CLI::Validator numberCheck(double min, bool strict) {
  return CLI::Validator(
      [min, strict](std::string& v) -> std::string {
        char* end = nullptr;
        const double d = std::strtod(v.c_str(), &end);
        if (end == v.c_str() || *end != '\0') return "'" + v + "' is not a number";
        // 1e400 read as infinity (a learning rate that diverged at once), and whole-number
        // options beyond 2^63 were clamped (--epochs 1e20 ran forever, seeds above 2^63 all
        // became one).
        if (!std::isfinite(d)) return "'" + v + "' is not a finite number";
        if (d >= 9.2e18) return "'" + v + "' is too large";
        if (strict ? d > min : d >= min) return "";
        char buf[32];
        std::snprintf(buf, sizeof buf, "%g", min);
        return "'" + v + "' must be " + (strict ? "more than " : "") + buf +
               (strict ? "" : " or more");
      },
      strict ? "NUMBER > 0" : "NUMBER >= 0");
}
inline CLI::Validator atLeast(double min) {
  return numberCheck(min, false);
}
inline CLI::Validator positive() {
  return numberCheck(0, true);
}

// "1 input", "3 inputs".
inline std::string count(int64_t n, const std::string& one, const std::string& many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
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
