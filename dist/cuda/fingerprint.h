// dist/cuda/fingerprint.h — how the NCCL process group carries a debug-mode (MINIDL_DIST_DEBUG)
// collective fingerprint (CollectiveDesc::fingerprint, dist/process_group.h, the same text as the
// Gloo group's): a fixed-size, zero-padded encoding, exchanged with one ncclAllGather before the
// collective itself, and its decoding for fingerprint_mismatch. Tested on the CPU by
// tests/dist/test_collective_fingerprint.cpp.
#pragma once
#include <algorithm>
#include <array>
#include <cstring>
#include <string>
#include <vector>

namespace minidl::dist::nccl_debug {

inline constexpr size_t kFingerprintBytes = 256;
using Encoded = std::array<char, kFingerprintBytes>;

// The fingerprint cut to kFingerprintBytes - 1 bytes and zero-padded.
inline Encoded encode(const std::string& fingerprint) {
  Encoded e{};
  std::memcpy(e.data(), fingerprint.data(), std::min(fingerprint.size(), kFingerprintBytes - 1));
  return e;
}

inline std::string decode(const Encoded& e) { return std::string(e.data(), strnlen(e.data(), e.size())); }

inline std::vector<std::string> decode_all(const std::vector<Encoded>& per_rank) {
  std::vector<std::string> out;
  for (const Encoded& e : per_rank) out.push_back(decode(e));
  return out;
}

}  // namespace minidl::dist::nccl_debug
