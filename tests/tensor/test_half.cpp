// tests/tensor/test_half.cpp — the 16-bit float dtypes, BFloat16 and Float16: conversions from and
// to float32 against PyTorch's bit patterns (round to nearest even, denormals, inf, NaN, float16
// overflow from 65520), strided and other-dtype copies, values and printing, safetensors BF16 / F16,
// the element-wise and reduction ops (float32 math, rounded back), and the clear error of an op
// that has no 16-bit path.
#include <cmath>
#include <cstring>

#include "minidl/tensor/ops_nn.h"
#include "minidl/tensor/serialize.h"
#include "tests/common/testing.h"

using namespace minidl;

namespace {

float f32(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// One float32 input and its bfloat16 and float16 bit patterns.
struct Golden {
  const char* what;
  uint32_t f32_bits;
  uint16_t bf16, fp16;
};

// Made with PyTorch 2.15 on the CPU:
//   t = torch.tensor([x], dtype=torch.float32)
//   t.to(torch.bfloat16).view(torch.int16), t.to(torch.float16).view(torch.int16)   (as uint16)
const Golden kGolden[] = {
    {"1", 0x3f800000, 0x3f80, 0x3c00},
    {"-2.5", 0xc0200000, 0xc020, 0xc100},
    {"pi", 0x40490fdb, 0x4049, 0x4248},
    {"1 + 2^-8: bf16 tie, even below", 0x3f808000, 0x3f80, 0x3c04},
    {"1 + 3 2^-8: bf16 tie, odd below", 0x3f818000, 0x3f82, 0x3c0c},
    {"float32 max: bf16 rounds to inf", 0x7f7fffff, 0x7f80, 0x7c00},
    {"smallest float32 denormal", 0x00000001, 0x0000, 0x0000},
    {"float32 denormal 0x00400000", 0x00400000, 0x0040, 0x0000},
    {"inf", 0x7f800000, 0x7f80, 0x7c00},
    {"-inf", 0xff800000, 0xff80, 0xfc00},
    {"65504: float16 max", 0x477fe000, 0x4780, 0x7bff},
    {"just below 65520", 0x477fefff, 0x4780, 0x7bff},
    {"65520: float16 overflows", 0x477ff000, 0x4780, 0x7c00},
    {"2^-24: float16 min subnormal", 0x33800000, 0x3380, 0x0001},
    {"2^-25: float16 tie to 0", 0x33000000, 0x3300, 0x0000},
    {"3 2^-25: float16 tie up", 0x33c00000, 0x33c0, 0x0002},
    {"2^-14: float16 min normal", 0x38800000, 0x3880, 0x0400},
    {"1 + 2^-11: float16 tie, even below", 0x3f801000, 0x3f80, 0x3c00},
    {"1 + 3 2^-11: float16 tie, odd below", 0x3f803000, 0x3f80, 0x3c02},
    {"-0", 0x80000000, 0x8000, 0x8000},
};

std::vector<uint16_t> bits_of(const Tensor& t) {
  const Tensor c = t.contiguous();
  const auto* p = static_cast<const uint16_t*>(c.raw_data());
  return std::vector<uint16_t>(p, p + c.numel());
}

Tensor golden_inputs() {
  std::vector<float> v;
  for (const Golden& g : kGolden) v.push_back(f32(g.f32_bits));
  return from_vector(v);
}

}  // namespace

TEST(Half, DTypeProperties) {
  EXPECT_EQ(element_size(DType::BFloat16), 2u);
  EXPECT_EQ(element_size(DType::Float16), 2u);
  EXPECT_STREQ(dtype_name(DType::BFloat16), "bfloat16");
  EXPECT_STREQ(dtype_name(DType::Float16), "float16");
  EXPECT_TRUE(is_floating(DType::BFloat16));
  EXPECT_TRUE(is_floating(DType::Float16));
  EXPECT_TRUE(Tensor({2, 3}, DType::BFloat16).is_floating_point());
  EXPECT_EQ(Tensor({2, 3}, DType::Float16).storage()->nbytes(), 12u);
}

TEST(Half, Float32ToBFloat16MatchesPyTorchBits) {
  const std::vector<uint16_t> got = bits_of(golden_inputs().to(DType::BFloat16));
  for (size_t i = 0; i < std::size(kGolden); ++i)
    EXPECT_EQ(got[i], kGolden[i].bf16) << kGolden[i].what << ": got 0x" << std::hex << got[i];
}

TEST(Half, Float32ToFloat16MatchesPyTorchBits) {
  const std::vector<uint16_t> got = bits_of(golden_inputs().to(DType::Float16));
  for (size_t i = 0; i < std::size(kGolden); ++i)
    EXPECT_EQ(got[i], kGolden[i].fp16) << kGolden[i].what << ": got 0x" << std::hex << got[i];
}

TEST(Half, WideningIsExact) {
  // bfloat16 is the upper half of a float32; float16 0x0001 is 2^-24, 0x0400 2^-14, 0x7bff 65504
  Tensor b({4}, DType::BFloat16);
  auto* bp = static_cast<uint16_t*>(b.raw_data());
  bp[0] = 0x3f81, bp[1] = 0x0040, bp[2] = 0xff80, bp[3] = 0xc049;
  EXPECT_EQ(b.to(DType::Float32).to_vector<float>(),
            (std::vector<float>{f32(0x3f810000), f32(0x00400000), -INFINITY, f32(0xc0490000)}));
  Tensor h({5}, DType::Float16);
  auto* hp = static_cast<uint16_t*>(h.raw_data());
  hp[0] = 0x0001, hp[1] = 0x0400, hp[2] = 0x7bff, hp[3] = 0x8000, hp[4] = 0x7c00;
  const std::vector<float> w = h.to(DType::Float32).to_vector<float>();
  EXPECT_EQ(w[0], std::ldexp(1.0f, -24));
  EXPECT_EQ(w[1], std::ldexp(1.0f, -14));
  EXPECT_EQ(w[2], 65504.0f);
  EXPECT_TRUE(w[3] == 0.0f && std::signbit(w[3]));
  EXPECT_EQ(w[4], INFINITY);
}

TEST(Half, NaNStaysNaN) {
  const Tensor nan = from_vector<float>({NAN, -NAN});
  for (DType t : {DType::BFloat16, DType::Float16}) {
    const Tensor h = nan.to(t);
    for (uint16_t b : bits_of(h)) {
      // exponent all ones, a non-zero (quiet) mantissa
      if (t == DType::BFloat16)
        EXPECT_TRUE((b & 0x7f80) == 0x7f80 && (b & 0x0040)) << std::hex << b;
      else
        EXPECT_TRUE((b & 0x7c00) == 0x7c00 && (b & 0x0200)) << std::hex << b;
    }
    for (float v : h.to_vector<float>()) EXPECT_TRUE(std::isnan(v)) << dtype_name(t);
  }
}

TEST(Half, RoundTripThroughEachOtherAndOtherDtypes) {
  // float64 goes through float32 first (as PyTorch converts); int64 and uint8 through float32 too
  const Tensor d = from_vector<double>({1.0, 0.1, -300.5, 65504.0});
  EXPECT_EQ(bits_of(d.to(DType::BFloat16)), bits_of(d.to(DType::Float32).to(DType::BFloat16)));
  EXPECT_EQ(d.to(DType::BFloat16).to_vector<double>(), (std::vector<double>{1.0, 0.10009765625, -300.0, 65536.0}));
  EXPECT_EQ(d.to(DType::Float16).to_vector<double>(), (std::vector<double>{1.0, 0.0999755859375, -300.5, 65504.0}));
  EXPECT_EQ(from_vector<int64_t>({3, -257}).to(DType::BFloat16).to_vector<float>(), (std::vector<float>{3, -256}));
  EXPECT_EQ(from_vector<float>({2.75f, -1.5f}).to(DType::Float16).to(DType::Int64).to_vector<int64_t>(),
            (std::vector<int64_t>{2, -1}));
  // float16 -> bfloat16: 1 + 2^-10 is exact in float16 and rounds (tie, even) to 1 in bfloat16
  Tensor h({1}, DType::Float16);
  *static_cast<uint16_t*>(h.raw_data()) = 0x3c01;
  EXPECT_EQ(bits_of(h.to(DType::BFloat16)), (std::vector<uint16_t>{0x3f80}));
}

TEST(Half, StridedAndBroadcastCopies) {
  const Tensor x = from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  const Tensor bt = x.to(DType::BFloat16).t();  // (3, 2) view, strides (1, 3)
  EXPECT_FALSE(bt.is_contiguous());
  EXPECT_EQ(bt.contiguous().to_vector<float>(), (std::vector<float>{1, 4, 2, 5, 3, 6}));
  EXPECT_EQ(bt.to(DType::Float32).to_vector<float>(), (std::vector<float>{1, 4, 2, 5, 3, 6}));
  Tensor dst = zeros({2, 3}, DType::Float16);
  dst.copy_(from_vector<float>({0.5f, 1.0f, -2.0f}));  // broadcast over rows
  EXPECT_EQ(dst.to_vector<float>(), (std::vector<float>{0.5f, 1, -2, 0.5f, 1, -2}));
  Tensor col = zeros({3, 2}, DType::BFloat16);
  col.t().copy_(x);  // a strided destination
  EXPECT_EQ(col.to_vector<float>(), (std::vector<float>{1, 4, 2, 5, 3, 6}));
}

TEST(Half, CreationValuesAndPrinting) {
  EXPECT_EQ(bits_of(full({2}, 1.0 + 1.0 / 256, DType::BFloat16)), (std::vector<uint16_t>{0x3f80, 0x3f80}));
  EXPECT_EQ(bits_of(ones({1}, DType::Float16)), (std::vector<uint16_t>{0x3c00}));
  EXPECT_EQ(from_vector({0.1, 2.0}, {2}, DType::BFloat16).to_vector<double>(), (std::vector<double>{0.10009765625, 2}));
  EXPECT_EQ(arange(0.0, 3.0, 1.0, DType::Float16).to_vector<float>(), (std::vector<float>{0, 1, 2}));
  EXPECT_EQ(scalar_tensor(0.1, DType::Float16).item(), 0.0999755859375);
  EXPECT_EQ(from_vector<float>({1.0f, -2.5f}).to(DType::BFloat16).to_string(),
            "tensor([ 1.0000, -2.5000], dtype=bfloat16)");
  EXPECT_EQ(scalar_tensor(65520.0, DType::Float16).to_string(), "tensor(inf, dtype=float16)");
  EXPECT_EQ(Tensor({2}, DType::BFloat16).desc(), "bfloat16[2] on cpu");
}

TEST(Half, SafetensorsRoundTripKeepsTheBits) {
  const Tensor b = golden_inputs().to(DType::BFloat16).reshape({4, 5});
  const Tensor h = golden_inputs().to(DType::Float16);
  const std::string bytes = serialize({{"b", b}, {"h", h}});
  EXPECT_NE(bytes.find(R"("b":{"dtype":"BF16","shape":[4,5])"), std::string::npos);
  EXPECT_NE(bytes.find(R"("h":{"dtype":"F16","shape":[20])"), std::string::npos);
  const SafetensorsFile f = deserialize(bytes);
  ASSERT_EQ(f.tensors.at("b").dtype(), DType::BFloat16);
  ASSERT_EQ(f.tensors.at("h").dtype(), DType::Float16);
  EXPECT_EQ(f.tensors.at("b").shape(), (Shape{4, 5}));
  EXPECT_EQ(bits_of(f.tensors.at("b")), bits_of(b));
  EXPECT_EQ(bits_of(f.tensors.at("h")), bits_of(h));
}

// ---- ops: float32 math on the widened values, rounded back ----

namespace {
Tensor sample_bf16(const Shape& shape, uint32_t seed) {
  return mul(from_vector(minidl::testing::values(static_cast<size_t>(shape_numel(shape)), seed), shape), 3.0)
      .to(DType::BFloat16);
}
}  // namespace

TEST(Half, ElementwiseOpsAreFloat32MathRoundedBack) {
  for (DType t : {DType::BFloat16, DType::Float16}) {
    const Tensor a = sample_bf16({4, 5}, 1).to(t), b = sample_bf16({5}, 2).to(t);
    const Tensor a32 = a.to(DType::Float32), b32 = b.to(DType::Float32);
    const std::string name = dtype_name(t);
    minidl::testing::expect_equal(add(a, b), add(a32, b32).to(t), name + " add (broadcast)");
    minidl::testing::expect_equal(mul(a, b), mul(a32, b32).to(t), name + " mul");
    minidl::testing::expect_equal(div(a, b), div(a32, b32).to(t), name + " div");
    minidl::testing::expect_equal(exp(a), exp(a32).to(t), name + " exp");
    minidl::testing::expect_equal(relu(a), relu(a32).to(t), name + " relu");
    minidl::testing::expect_equal(gelu(a), gelu(a32).to(t), name + " gelu");
    minidl::testing::expect_equal(add(a, 0.5), add(a32, 0.5).to(t), name + " add scalar");
    Tensor c = a.clone();
    add_(c, b, 2.0);
    minidl::testing::expect_equal(c, add(a32, mul(b32, 2.0)).to(t), name + " add_ alpha");
    EXPECT_EQ(add(a, b).dtype(), t);
  }
}

TEST(Half, OpsAgreeWithFloat32WithinBFloat16Precision) {
  // against float32 on the unrounded inputs: one bfloat16 rounding of each input and output
  const Tensor x32 = from_vector(minidl::testing::values(64, 3), {8, 8});
  const Tensor x = x32.to(DType::BFloat16);
  const double eps = std::ldexp(1.0, -8);  // bfloat16 relative precision (8 significant bits)
  minidl::testing::expect_close(mul(x, x).to(DType::Float32), mul(x32, x32), 3 * eps, 1e-6, "x*x");
  minidl::testing::expect_close(tanh(x).to(DType::Float32), tanh(x32), 2 * eps, 1e-6, "tanh");
  minidl::testing::expect_close(sum(x, {1}).to(DType::Float32), sum(x32, {1}), 2 * eps, 8 * eps, "sum rows");
  minidl::testing::expect_close(mean(x).to(DType::Float32), mean(x32), 2 * eps, 8 * eps, "mean");
  minidl::testing::expect_close(softmax(x, 1).to(DType::Float32), softmax(x32, 1), 3 * eps, 1e-6, "softmax");
}

TEST(Half, ReductionsReduceInFloat32) {
  // 1 + 256 x 2^-8: each addend is exact in bfloat16, the float32 running sum (2) is too, while a
  // bfloat16 accumulator would stall at 1 (1 + 2^-8 rounds back to 1)
  std::vector<float> v(257, 1.0f / 256);
  v[0] = 1.0f;
  const Tensor x = from_vector(v).to(DType::BFloat16);
  EXPECT_EQ(sum(x).item(), 2.0);
  EXPECT_EQ(sum(x).dtype(), DType::BFloat16);
  const Tensor m = from_vector<float>({1, 7, 3, 7, -2, 0}, {2, 3}).to(DType::Float16);
  const MaxResult r = max(m, 1);
  EXPECT_EQ(r.values.to_vector<float>(), (std::vector<float>{7, 7}));
  EXPECT_EQ(r.indices.to_vector<int64_t>(), (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(argmax(m, 1).to_vector<int64_t>(), (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(var(from_vector<float>({1, 2, 3, 4}).to(DType::BFloat16)).to_vector<float>(),
            (std::vector<float>{1.6640625f}));  // 5/3 in bfloat16
}

TEST(Half, OpsWithoutA16BitPathNameTheOpAndDtype) {
  const Tensor a = ones({2, 2}, DType::Float16);  // (bfloat16 has products: tests/tensor/test_ops_linalg.cpp)
  EXPECT_THROW_MSG(matmul(a, a), std::invalid_argument, "matmul: not implemented for float16");
  EXPECT_THROW_MSG(layer_norm_forward(ones({2, 4}, DType::Float16), {4}, Tensor(), Tensor(), 1e-5),
                   std::invalid_argument, "not implemented for float16");
}
