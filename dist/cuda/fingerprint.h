// dist/cuda/fingerprint.h — the debug-mode (MINIDL_DIST_DEBUG) collective fingerprint of the NCCL
// process group, as host code: what a collective is ("seq=3 op=all_reduce dtype=float32
// shape=[3, 4] op=sum", with its human form "all_reduce float32[3, 4] op=sum"), its fixed-size
// encoding (exchanged with one ncclAllGather before the collective itself, so ranks that called
// different collectives fail fast instead of hanging or reducing garbage), and the comparison's
// message, worded like the Gloo group's. Tested on the CPU by tests/dist/test_nccl_fingerprint.cpp.
#pragma once
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace minidl::dist::nccl_debug {

inline constexpr size_t kFingerprintBytes = 256;
using Encoded = std::array<char, kFingerprintBytes>;

struct Fingerprint {
  int64_t seq = 0;
  std::string op;     // "all_reduce"
  std::string dtype;  // "float32" ("" for barrier)
  std::string shape;  // "[3, 4]" ("[*, 4]" for all_gather, whose first dim may differ)
  std::string extra;  // "op=sum", "root=1", ""

  std::string key() const {
    std::string s = "seq=" + std::to_string(seq) + " op=" + op + " dtype=" + (dtype.empty() ? "none" : dtype) +
                    " shape=" + shape;
    return extra.empty() ? s : s + " " + extra;
  }
  std::string human() const {
    std::string s = op;
    if (!dtype.empty()) s += " " + dtype + shape;
    return extra.empty() ? s : s + " " + extra;
  }
  // key, a newline, human; cut to kFingerprintBytes - 1 bytes and zero-padded
  Encoded encode() const {
    Encoded e{};
    const std::string s = key() + "\n" + human();
    std::memcpy(e.data(), s.data(), std::min(s.size(), kFingerprintBytes - 1));
    return e;
  }
};

// Empty when every rank's encoding equals rank 0's, else the message naming the first that differs.
inline std::string mismatch(int64_t seq, const std::vector<Encoded>& per_rank) {
  auto text = [](const Encoded& e) { return std::string(e.data(), strnlen(e.data(), e.size())); };
  auto human = [&](const Encoded& e) {
    const std::string t = text(e);
    return t.substr(t.find('\n') == std::string::npos ? 0 : t.find('\n') + 1);
  };
  for (size_t r = 1; r < per_rank.size(); ++r)
    if (text(per_rank[r]) != text(per_rank[0]))
      return "MINIDL_DIST_DEBUG: collective #" + std::to_string(seq) + " mismatch: rank 0 called " +
             human(per_rank[0]) + ", rank " + std::to_string(r) + " called " + human(per_rank[r]);
  return "";
}

}  // namespace minidl::dist::nccl_debug
