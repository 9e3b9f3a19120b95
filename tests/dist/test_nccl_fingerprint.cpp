// tests/dist/test_nccl_fingerprint.cpp — the NCCL process group's debug-mode fingerprints
// (dist/cuda/fingerprint.h), on the CPU: the key and human forms match the Gloo group's wording,
// the fixed-size encoding keeps them, and the comparison names the first rank that differs.
#include <gtest/gtest.h>

#include "minidl/dist/cuda/fingerprint.h"

using namespace minidl::dist::nccl_debug;

TEST(NcclFingerprint, KeyAndHumanFormsNameTheCollective) {
  const Fingerprint f{3, "all_reduce", "float32", "[3, 4]", "op=sum"};
  EXPECT_EQ(f.key(), "seq=3 op=all_reduce dtype=float32 shape=[3, 4] op=sum");
  EXPECT_EQ(f.human(), "all_reduce float32[3, 4] op=sum");
  const Fingerprint b{7, "barrier", "", "", ""};
  EXPECT_EQ(b.key(), "seq=7 op=barrier dtype=none shape=");
  EXPECT_EQ(b.human(), "barrier");
}

TEST(NcclFingerprint, EqualCallsPassDifferentCallsNameBothRanks) {
  const Encoded a = Fingerprint{5, "all_reduce", "float32", "[10]", "op=sum"}.encode();
  EXPECT_EQ(mismatch(5, {a, a, a}), "");
  const Encoded other_shape = Fingerprint{5, "all_reduce", "float32", "[12]", "op=sum"}.encode();
  EXPECT_EQ(mismatch(5, {a, a, other_shape}),
            "MINIDL_DIST_DEBUG: collective #5 mismatch: rank 0 called all_reduce float32[10] op=sum, rank 2 called "
            "all_reduce float32[12] op=sum");
  const Encoded bcast = Fingerprint{5, "broadcast", "float32", "[10]", "root=0"}.encode();
  EXPECT_EQ(mismatch(5, {a, bcast}),
            "MINIDL_DIST_DEBUG: collective #5 mismatch: rank 0 called all_reduce float32[10] op=sum, rank 1 called "
            "broadcast float32[10] root=0");
  // the same call at a different sequence number (a rank skipped one) differs too
  const Encoded later = Fingerprint{6, "all_reduce", "float32", "[10]", "op=sum"}.encode();
  EXPECT_NE(mismatch(5, {a, later}), "");
}

TEST(NcclFingerprint, EncodingIsFixedSizeZeroPaddedAndCutSafely) {
  const Encoded e = Fingerprint{1, "all_gather", "int64", "[*, 2]", ""}.encode();
  EXPECT_EQ(std::string(e.data()), "seq=1 op=all_gather dtype=int64 shape=[*, 2]\nall_gather int64[*, 2]");
  EXPECT_EQ(e.back(), '\0');
  const Encoded huge = Fingerprint{1, "all_reduce", "float32", "[" + std::string(400, '9') + "]", ""}.encode();
  EXPECT_EQ(strnlen(huge.data(), huge.size()), kFingerprintBytes - 1);  // cut, still terminated
  EXPECT_EQ(mismatch(1, {huge, huge}), "");
}
