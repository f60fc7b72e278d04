// MatMul and Gemm on the types oneDNN's kernels do not take (float64, int32, int64, uint64),
// which run on the reference kernel (kernels/nn.cpp): numpy broadcasting of batch dimensions,
// 1-D operands, Gemm's transposes, alpha, beta and C, against products written out here.
#include <gtest/gtest.h>

#include <random>

#include "engine/session.h"
#include "tests/engine/onnx_builder.h"

namespace {

using namespace dw::engine;

template <class T>
Tensor filled(const Shape& s, std::mt19937& rng) {
  std::uniform_int_distribution<int> d(-5, 5);
  std::vector<T> v(static_cast<size_t>(numElements(s)));
  for (auto& x : v) x = static_cast<T>(std::is_unsigned_v<T> ? d(rng) + 5 : d(rng));
  return Tensor::fromVector(v, s);
}

dw::Result<Tensor> run(const std::string& op, int32_t type, const std::vector<Tensor>& in,
                       std::vector<onnx::AttributeProto> attrs = {}) {
  return test::runOneNode(op, type, in, attrs);
}

template <class T>
void checkMatMul(int32_t type) {
  std::mt19937 rng(7);
  // [2, 1, 3, 4] x [3, 4, 5] -> [2, 3, 3, 5]; then 1-D operands on either side.
  const Tensor a = filled<T>({2, 1, 3, 4}, rng), b = filled<T>({3, 4, 5}, rng);
  auto y = run("MatMul", type, {a, b});
  ASSERT_TRUE(y.ok()) << y.message();
  ASSERT_EQ(y->shape(), (Shape{2, 3, 3, 5}));
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 3; ++j)
      for (int64_t m = 0; m < 3; ++m)
        for (int64_t n = 0; n < 5; ++n) {
          T want = 0;
          for (int64_t k = 0; k < 4; ++k)
            want += a.data<T>()[(i * 3 + m) * 4 + k] * b.data<T>()[(j * 4 + k) * 5 + n];
          ASSERT_EQ(y->data<T>()[((i * 3 + j) * 3 + m) * 5 + n], want) << i << j << m << n;
        }
  const Tensor v = filled<T>({4}, rng);
  auto left = run("MatMul", type, {v, b});
  ASSERT_TRUE(left.ok()) << left.message();
  EXPECT_EQ(left->shape(), (Shape{3, 5}));
  auto right = run("MatMul", type, {a, v});
  ASSERT_TRUE(right.ok()) << right.message();
  EXPECT_EQ(right->shape(), (Shape{2, 1, 3}));
  T want = 0;
  for (int64_t k = 0; k < 4; ++k) want += a.data<T>()[k] * v.data<T>()[k];
  EXPECT_EQ(right->data<T>()[0], want);
}

TEST(MatMulReference, Float64AndIntegersWithBroadcasting) {
  checkMatMul<double>(onnx::TensorProto::DOUBLE);
  checkMatMul<int32_t>(onnx::TensorProto::INT32);
  checkMatMul<int64_t>(onnx::TensorProto::INT64);
  checkMatMul<uint64_t>(onnx::TensorProto::UINT64);
}

TEST(MatMulReference, GemmFloat64TransposesScalesAndAddsC) {
  std::mt19937 rng(8);
  const Tensor a = filled<double>({4, 3}, rng), b = filled<double>({5, 4}, rng),
               c = filled<double>({5}, rng);
  // A' = A^T [3, 4], B' = B^T [4, 5]: Y = 0.5 A' B' + 2 C.
  auto y = run("Gemm", onnx::TensorProto::DOUBLE, {a, b, c},
               {test::attribute("transA", int64_t{1}), test::attribute("transB", int64_t{1}),
                test::attribute("alpha", 0.5f), test::attribute("beta", 2.0f)});
  ASSERT_TRUE(y.ok()) << y.message();
  ASSERT_EQ(y->shape(), (Shape{3, 5}));
  for (int64_t m = 0; m < 3; ++m)
    for (int64_t n = 0; n < 5; ++n) {
      double want = 0;
      for (int64_t k = 0; k < 4; ++k)
        want += a.data<double>()[k * 3 + m] * b.data<double>()[n * 4 + k];
      EXPECT_DOUBLE_EQ(y->data<double>()[m * 5 + n], 0.5 * want + 2 * c.data<double>()[n]);
    }
  auto bad = run("MatMul", onnx::TensorProto::INT64,
                 {filled<int64_t>({2, 3}, rng), filled<int64_t>({4, 2}, rng)});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("inner dimensions differ"), std::string::npos) << bad.message();
}

}  // namespace
