// tests/dist/test_collective_fingerprint.cpp — the debug-mode (MINIDL_DIST_DEBUG) collective
// fingerprints both process groups compare (dist/process_group.h), and the NCCL group's
// fixed-size encoding of them (dist/cuda/fingerprint.h), on the CPU: the key and human forms
// name the collective, the comparison names the first rank that differs, the encoding keeps them.
#include <gtest/gtest.h>

#include "minidl/dist/cuda/fingerprint.h"
#include "minidl/dist/process_group.h"

using namespace minidl::dist;
using nccl_debug::decode;
using nccl_debug::encode;

TEST(CollectiveFingerprint, KeyAndHumanFormsNameTheCollective) {
  const CollectiveDesc f{"all_reduce", "float32", "[3, 4]", "op=sum"};
  EXPECT_EQ(f.fingerprint(3), "seq=3 op=all_reduce dtype=float32 shape=[3, 4] op=sum\nall_reduce float32[3, 4] op=sum");
  EXPECT_EQ(f.human(), "all_reduce float32[3, 4] op=sum");
  EXPECT_EQ(f.sig(), "float32[3, 4]");
  const CollectiveDesc b{"barrier", "", "", ""};
  EXPECT_EQ(b.fingerprint(7), "seq=7 op=barrier dtype=none shape=\nbarrier");
  EXPECT_EQ(b.human(), "barrier");
  EXPECT_EQ(b.sig(), "");
}

TEST(CollectiveFingerprint, EqualCallsPassDifferentCallsNameBothRanks) {
  const std::string a = CollectiveDesc{"all_reduce", "float32", "[10]", "op=sum"}.fingerprint(5);
  EXPECT_EQ(fingerprint_mismatch(5, {a, a, a}), "");
  const std::string other_shape = CollectiveDesc{"all_reduce", "float32", "[12]", "op=sum"}.fingerprint(5);
  EXPECT_EQ(fingerprint_mismatch(5, {a, a, other_shape}),
            "MINIDL_DIST_DEBUG: collective #5 mismatch: rank 0 called all_reduce float32[10] op=sum, rank 2 called "
            "all_reduce float32[12] op=sum");
  const std::string bcast = CollectiveDesc{"broadcast", "float32", "[10]", "root=0"}.fingerprint(5);
  EXPECT_EQ(fingerprint_mismatch(5, {a, bcast}),
            "MINIDL_DIST_DEBUG: collective #5 mismatch: rank 0 called all_reduce float32[10] op=sum, rank 1 called "
            "broadcast float32[10] root=0");
  // the same call at a different sequence number (a rank skipped one) differs too
  const std::string later = CollectiveDesc{"all_reduce", "float32", "[10]", "op=sum"}.fingerprint(6);
  EXPECT_NE(fingerprint_mismatch(5, {a, later}), "");
}

TEST(CollectiveFingerprint, NcclEncodingIsFixedSizeZeroPaddedAndCutSafely) {
  const std::string f = CollectiveDesc{"all_gather", "int64", "[*, 2]", ""}.fingerprint(1);
  const nccl_debug::Encoded e = encode(f);
  EXPECT_EQ(std::string(e.data()), "seq=1 op=all_gather dtype=int64 shape=[*, 2]\nall_gather int64[*, 2]");
  EXPECT_EQ(e.back(), '\0');
  EXPECT_EQ(decode(e), f);
  const nccl_debug::Encoded huge =
      encode(CollectiveDesc{"all_reduce", "float32", "[" + std::string(400, '9') + "]", ""}.fingerprint(1));
  EXPECT_EQ(decode(huge).size(), nccl_debug::kFingerprintBytes - 1);  // cut, still terminated
  EXPECT_EQ(fingerprint_mismatch(1, nccl_debug::decode_all({huge, huge})), "");
}
