// The elementwise ops of two inputs (ops/binary_table.h): every row runs on the reference table,
// the rows that name a oneDNN algorithm on the onednn table and the rows marked for cuda on the
// cuda table; attribute choices pick their function or say what is allowed. Their numerics are the
// ONNX backend cases' (conformance) and, for Mod's two remainders, checked here.
#include <gtest/gtest.h>
#include <onnx/defs/schema.h>
#include <onnx/onnx_pb.h>

#include <cstdlib>
#include <map>
#include <vector>

#include "engine/cuda/cuda.h"
#include "engine/kernel.h"
#include "engine/session.h"
#include "engine/training/grad_builder.h"
#include "nodes/catalogue.h"
#include "ops/binary_table.h"
#include "ops/reduce_table.h"

namespace {

using namespace dw::engine;
using dw::Result;

TEST(BinaryTable, EveryRowHasItsKernels) {
  const auto& reg = KernelRegistry::global();
  for (const auto& row : dw::ops::binaryOps()) {
    SCOPED_TRACE(row.name);
    EXPECT_NE(reg.find("", row.name, row.since, kReferenceTable), nullptr);
    EXPECT_EQ(reg.find("", row.name, row.since - 1, kReferenceTable), nullptr)
        << "runs before the opset that introduced it";
    if (row.onednn != dw::ops::BinaryAlg::kNone) {
      EXPECT_NE(reg.find("", row.name, row.since, kOneDnnTable), nullptr);
    }
    if (row.cuda && cuda::built()) {
      EXPECT_NE(reg.find("", row.name, row.since, kCudaTable), nullptr);
    }
    // Ops newer than the catalogue's default opset are found at theirs.
    EXPECT_NE(dw::Catalogue::instance().find(dw::kOnnxDomain, row.name, row.since), nullptr)
        << "not an ONNX op";
  }
}

// BitwiseAnd/Or/Xor/Not (opset 18) on signed and unsigned integers, with broadcasting, against
// C's operators written out; floats are refused with the op's name in the error.
TEST(BinaryTable, BitwiseOps) {
  auto run = [](const char* op, const Tensor& a, const Tensor* b) -> Result<Tensor> {
    onnx::ModelProto m;
    m.set_ir_version(8);
    m.add_opset_import()->set_version(18);
    auto* g = m.mutable_graph();
    g->set_name("bitwise");
    const int et = a.dtype() == DType::kInt32   ? onnx::TensorProto::INT32
                   : a.dtype() == DType::kUInt8 ? onnx::TensorProto::UINT8
                                                : onnx::TensorProto::FLOAT;
    for (const char* name : {"a", "b", "y"}) {
      if (name[0] == 'b' && !b) continue;
      auto* v = name[0] == 'y' ? g->add_output() : g->add_input();
      v->set_name(name);
      v->mutable_type()->mutable_tensor_type()->set_elem_type(et);
    }
    auto* n = g->add_node();
    n->set_op_type(op);
    n->add_input("a");
    if (b) n->add_input("b");
    n->add_output("y");
    auto s = InferenceSession::create(m);
    if (!s) return s.status();
    std::map<std::string, Tensor> feeds{{"a", a}};
    if (b) feeds["b"] = *b;
    auto out = (*s)->run(feeds);
    if (!out) return out.status();
    return out->at("y");
  };
  const std::vector<int32_t> av{-7, 0, 12, 255, -1, 1 << 30};
  const std::vector<int32_t> bv{5, -3, 10};
  const Tensor a = Tensor::fromVector(av, {2, 3}), b = Tensor::fromVector(bv, {3});
  for (const char* op : {"BitwiseAnd", "BitwiseOr", "BitwiseXor"}) {
    SCOPED_TRACE(op);
    auto y = run(op, a, &b);
    ASSERT_TRUE(y.ok()) << y.message();
    ASSERT_EQ(y->shape(), (dw::engine::Shape{2, 3}));
    for (int i = 0; i < 6; ++i) {
      const int32_t x = av[i], w = bv[i % 3];
      const int32_t want = op[7] == 'A' ? (x & w) : op[7] == 'O' ? (x | w) : (x ^ w);
      EXPECT_EQ(y->data<int32_t>()[i], want) << i;
    }
  }
  auto notY = run("BitwiseNot", a, nullptr);
  ASSERT_TRUE(notY.ok()) << notY.message();
  for (int i = 0; i < 6; ++i) EXPECT_EQ(notY->data<int32_t>()[i], ~av[i]);
  const Tensor u = Tensor::fromVector(std::vector<uint8_t>{0, 1, 0xF0, 0xFF}, {4});
  auto notU = run("BitwiseNot", u, nullptr);
  ASSERT_TRUE(notU.ok()) << notU.message();
  EXPECT_EQ(notU->data<uint8_t>()[2], 0x0F);
  EXPECT_EQ(notU->data<uint8_t>()[3], 0);
  const Tensor f = Tensor::fromVector(std::vector<float>{1, 2}, {2});
  auto bad = run("BitwiseAnd", f, &f);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("BitwiseAnd"), std::string::npos) << bad.message();
}

// Mod(a, b) over int32 and float with fmod 0 (the divisor's sign) and 1 (the dividend's).
Result<Tensor> mod(const Tensor& a, const Tensor& b, const char* fmod) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(17);
  auto* g = m.mutable_graph();
  g->set_name("mod");
  for (const char* name : {"a", "b", "y"}) {
    auto* v = name[0] == 'y' ? g->add_output() : g->add_input();
    v->set_name(name);
    v->mutable_type()->mutable_tensor_type()->set_elem_type(
        a.dtype() == DType::kFloat ? onnx::TensorProto::FLOAT : onnx::TensorProto::INT32);
  }
  auto* n = g->add_node();
  n->set_op_type("Mod");
  n->add_input("a");
  n->add_input("b");
  n->add_output("y");
  if (fmod) {
    auto* at = n->add_attribute();
    at->set_name("fmod");
    at->set_type(onnx::AttributeProto::INT);
    at->set_i(std::atoi(fmod));
  }
  auto s = InferenceSession::create(m);
  if (!s) return s.status();
  auto r = (*s)->run({{"a", a}, {"b", b}});
  if (!r) return r.status();
  return r->at("y");
}

TEST(BinaryTable, ModChoosesItsRemainderByAttribute) {
  const Tensor ai = Tensor::fromVector(std::vector<int32_t>{7, -7, 7, -7}, {4});
  const Tensor bi = Tensor::fromVector(std::vector<int32_t>{3, 3, -3, -3}, {4});
  auto py = mod(ai, bi, nullptr);  // fmod 0, the schema's default
  ASSERT_TRUE(py.ok()) << py.message();
  EXPECT_EQ((std::vector<int32_t>(py->data<int32_t>(), py->data<int32_t>() + 4)),
            (std::vector<int32_t>{1, 2, -2, -1}));
  auto c = mod(ai, bi, "1");
  ASSERT_TRUE(c.ok()) << c.message();
  EXPECT_EQ((std::vector<int32_t>(c->data<int32_t>(), c->data<int32_t>() + 4)),
            (std::vector<int32_t>{1, -1, 1, -1}));
  const Tensor af = Tensor::fromVector(std::vector<float>{5.5f, -5.5f}, {2});
  const Tensor bf = Tensor::fromVector(std::vector<float>{2.0f, 2.0f}, {2});
  auto f = mod(af, bf, "1");
  ASSERT_TRUE(f.ok()) << f.message();
  EXPECT_FLOAT_EQ(f->data<float>()[0], 1.5f);
  EXPECT_FLOAT_EQ(f->data<float>()[1], -1.5f);
  auto bad = mod(ai, bi, "2");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("fmod must be 0 or 1, got '2'"), std::string::npos) << bad.message();
  auto zero = mod(ai, Tensor::fromVector(std::vector<int32_t>{3, 0, 1, 1}, {4}), nullptr);
  ASSERT_FALSE(zero.ok());
  EXPECT_NE(zero.message().find("integer modulo by zero"), std::string::npos) << zero.message();
}

// The Reduce* ops (ops/reduce_table.h) likewise, and the opset from which each takes its axes
// as an input, checked against libonnx's schemas where they reach it.
TEST(ReduceTable, EveryRowHasItsKernelsAndItsAxesOpset) {
  const auto& reg = KernelRegistry::global();
  for (const auto& row : dw::ops::reduceOps()) {
    SCOPED_TRACE(row.name);
    EXPECT_NE(reg.find("", row.name, 13, kReferenceTable), nullptr);
    if (row.onednn != dw::ops::ReduceAlg::kNone) {
      EXPECT_NE(reg.find("", row.name, 13, kOneDnnTable), nullptr);
    }
    if (row.cuda && cuda::built()) {
      EXPECT_NE(reg.find("", row.name, 13, kCudaTable), nullptr);
    }
    EXPECT_EQ(training::findGradBuilder("", row.name, 13) != nullptr, row.gradient);
    for (int opset = 11; opset <= dw::kDefaultOnnxOpset; ++opset) {
      const auto* schema = onnx::OpSchemaRegistry::Schema(row.name, opset);
      ASSERT_NE(schema, nullptr) << opset;
      EXPECT_EQ(schema->inputs().size() > 1, row.axesAsInput(opset)) << "opset " << opset;
    }
  }
}

}  // namespace
