// tensor/crc32.cpp — byte-at-a-time table-driven CRC-32 (see crc32.h).
#include "minidl/tensor/crc32.h"

#include <array>

namespace minidl {

namespace {
// table[b]: the CRC register after shifting the byte b through the polynomial, 8 steps at once.
constexpr std::array<uint32_t, 256> make_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t b = 0; b < 256; ++b) {
    uint32_t r = b;
    for (int k = 0; k < 8; ++k) r = (r & 1u) ? (r >> 1) ^ 0xEDB88320u : r >> 1;
    table[b] = r;
  }
  return table;
}
constexpr std::array<uint32_t, 256> kTable = make_table();
}  // namespace

uint32_t crc32(const void* data, size_t size, uint32_t crc) {
  const auto* p = static_cast<const uint8_t*>(data);
  uint32_t r = ~crc;
  for (size_t i = 0; i < size; ++i) r = kTable[(r ^ p[i]) & 0xFFu] ^ (r >> 8);
  return ~r;
}

}  // namespace minidl
