// Conv on float64, which oneDNN's kernel hands to the reference table's direct convolution
// (kernels/direct_conv.h): against oneDNN's float32 convolution of the same values (exact in
// both types) over groups, strides, dilations, asymmetric and automatic padding, 1-D to 3-D
// and a bias; and its errors.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "engine/session.h"
#include "tests/engine/onnx_builder.h"

namespace {

using namespace dw::engine;

struct Case {
  Shape x, w;
  std::vector<onnx::AttributeProto> attrs;
  bool bias;
};

dw::Result<Tensor> run(const Case& c, int32_t type, const Tensor& x, const Tensor& w,
                       const Tensor& b) {
  return test::runOneNode("Conv", type, {x, w, c.bias ? b : Tensor()}, c.attrs);
}

// Values on a grid of 1/8, exact in float32 and float64.
template <class T>
Tensor grid(const Shape& s, std::mt19937& rng) {
  std::uniform_int_distribution<int> d(-16, 16);
  std::vector<T> v(static_cast<size_t>(numElements(s)));
  for (auto& x : v) x = static_cast<T>(d(rng) / 8.0);
  return Tensor::fromVector(v, s);
}

TEST(ConvFloat64, MatchesTheFloat32Convolution) {
  const std::vector<Case> cases{
      {{2, 4, 9, 8},
       {6, 2, 3, 3},
       {test::attribute("group", int64_t{2}),
        test::attribute("strides", std::vector<int64_t>{2, 1}),
        test::attribute("dilations", std::vector<int64_t>{1, 2}),
        test::attribute("pads", std::vector<int64_t>{1, 0, 2, 1})},
       true},
      {{1, 3, 11}, {5, 3, 4}, {test::attribute("auto_pad", std::string("SAME_LOWER"))}, false},
      {{1, 2, 4, 5, 6},
       {3, 2, 2, 3, 2},
       {test::attribute("kernel_shape", std::vector<int64_t>{2, 3, 2}),
        test::attribute("pads", std::vector<int64_t>{0, 1, 1, 1, 0, 0})},
       true},
      {{2, 6, 7, 7},
       {6, 1, 3, 3},
       {test::attribute("group", int64_t{6}),
        test::attribute("strides", std::vector<int64_t>{2, 2})},
       true},
  };
  std::mt19937 rng(3);
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    const Tensor x = grid<double>(c.x, rng), w = grid<double>(c.w, rng),
                 b = grid<double>({c.w[0]}, rng);
    auto y64 = run(c, onnx::TensorProto::DOUBLE, x, w, b);
    ASSERT_TRUE(y64.ok()) << "case " << i << ": " << y64.message();
    ASSERT_EQ(y64->dtype(), DType::kDouble);
    auto toFloat = [](const Tensor& t) {
      std::vector<float> v(static_cast<size_t>(t.size()));
      for (int64_t k = 0; k < t.size(); ++k) v[k] = static_cast<float>(t.data<double>()[k]);
      return Tensor::fromVector(v, t.shape());
    };
    auto y32 = run(c, onnx::TensorProto::FLOAT, toFloat(x), toFloat(w), toFloat(b));
    ASSERT_TRUE(y32.ok()) << "case " << i << ": " << y32.message();
    ASSERT_EQ(y64->shape(), y32->shape()) << "case " << i;
    for (int64_t k = 0; k < y64->size(); ++k)
      ASSERT_NEAR(y64->data<double>()[k], y32->data<float>()[k], 1e-5)
          << "case " << i << " at " << k;
  }
}

TEST(ConvFloat64, ErrorsNameWhatDoesNotFit) {
  std::mt19937 rng(4);
  const Case c{{1, 4, 5, 5}, {2, 3, 3, 3}, {}, false};
  auto y =
      run(c, onnx::TensorProto::DOUBLE, grid<double>(c.x, rng), grid<double>(c.w, rng), Tensor());
  ASSERT_FALSE(y.ok());
  EXPECT_NE(y.message().find("do not match group 1"), std::string::npos) << y.message();
  const Case big{{1, 1, 2, 2}, {1, 1, 3, 3}, {}, false};
  y = run(big, onnx::TensorProto::DOUBLE, grid<double>(big.x, rng), grid<double>(big.w, rng),
          Tensor());
  ASSERT_FALSE(y.ok());
  EXPECT_NE(y.message().find("larger than the padded input"), std::string::npos) << y.message();
}

}  // namespace
