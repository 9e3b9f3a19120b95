// kernels/cpu/amx_tiles.h — the AMX tile state the bfloat16 kernels on tiles share
// (gemm_bf16_amx.cpp, conv2d_bf16_implicit.cpp): one configuration, every tile 16 rows of 64
// bytes, loaded by each thread before its first tile instruction and released after its last (so
// a context switch saves no tile state). Callers run them only where gemm_bf16_amx_supported()
// (which also asks Linux for the tile state, once per process).
#pragma once
#if defined(__x86_64__) && defined(__GNUC__) && defined(__linux__)
#include <immintrin.h>

#include <cstdint>

#define MINIDL_AMX_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,amx-tile,amx-bf16")))

namespace minidl::kernels::cpu::amx {

// The configuration ldtilecfg loads (Intel SDM, "TILECFG"): palette 1, and each of the eight tiles
// 16 rows of 64 bytes (16 floats, 32 bf16 or 16 k-pair words).
struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t bytes_per_row[16] = {};
  uint8_t rows[16] = {};
  TileConfig() {
    for (int t = 0; t < 8; ++t) {
      bytes_per_row[t] = 64;
      rows[t] = 16;
    }
  }
};

MINIDL_AMX_TARGET inline void configure_tiles() {
  static const TileConfig config;
  _tile_loadconfig(&config);
}
MINIDL_AMX_TARGET inline void release_tiles() { _tile_release(); }

}  // namespace minidl::kernels::cpu::amx
#endif
