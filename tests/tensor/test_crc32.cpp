// tests/tensor/test_crc32.cpp — CRC-32 (tensor/crc32.h) against the known values of zlib.crc32.
#include <string>

#include "minidl/tensor/crc32.h"
#include "tests/common/testing.h"

using namespace minidl;

TEST(Crc32, MatchesZlibsCheckValues) {
  const std::string digits = "123456789";
  EXPECT_EQ(crc32(digits.data(), digits.size()), 0xCBF43926u);  // the CRC-32 check value
  EXPECT_EQ(crc32(nullptr, 0), 0u);
  const std::string fox = "The quick brown fox jumps over the lazy dog";
  EXPECT_EQ(crc32(fox.data(), fox.size()), 0x414FA339u);  // python3 -c 'import zlib; print(hex(zlib.crc32(b"...")))'
}

TEST(Crc32, ChainedPiecesEqualTheWhole) {
  const std::string fox = "The quick brown fox jumps over the lazy dog";
  const uint32_t first = crc32(fox.data(), 10);
  EXPECT_EQ(crc32(fox.data() + 10, fox.size() - 10, first), crc32(fox.data(), fox.size()));
}
