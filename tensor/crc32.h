// tensor/crc32.h — CRC-32 as zlib and Python's zlib.crc32 compute it (the reflected polynomial
// 0xEDB88320, initial value and final xor 0xFFFFFFFF), so a checksum written by minidl can be
// checked by any tool. Chain calls to checksum bytes in pieces:
//   uint32_t c = crc32(a, na);  c = crc32(b, nb, c);   // == crc32 of a then b
#pragma once
#include <cstddef>
#include <cstdint>

namespace minidl {

uint32_t crc32(const void* data, size_t size, uint32_t crc = 0);

}  // namespace minidl
