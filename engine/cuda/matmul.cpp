// Matrix products on the cuda backend: Gemm and MatMul through cuBLAS, and through cuBLASLt
// where a product carries what the fusion passes gave it: a bias and an activation after it
// (inference, and the forward pass of training), or the bias gradient beside a weight gradient.
// cuBLASLt applies those in the product's epilogue, while the result is still in registers; what
// it cannot take runs as separate passes over the result, with the same results.
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <tuple>

#include "engine/cuda/kernel_util.h"
#include "engine/fusion/fused.h"
#include "engine/kernels/common.h"
#include "engine/unary_op.h"

namespace dw::engine::cuda {

namespace {

// ---- Column-major view: Y^T = op(B)^T op(A)^T, so cuBLAS's A is our B ----

// The operands as cuBLAS reads them in the session's precision: as they are (fp32, tf32), or
// bf16 copies of the first `na` and `nb` elements (bf16) from the kernel's scratch.
struct Operands {
  const void* a;
  const void* b;
  cudaDataType type = CUDA_R_32F;
};

Result<Operands> operands(KernelContext& ctx, CudaBackend& be, const float* a, int64_t na,
                          const float* b, int64_t nb) {
  Operands o{a, b};
  if (be.math() != Math::kBf16) return o;
  Tensor* ca = ctx.scratch(DType::kBFloat16, {na});
  Tensor* cb = ca ? ctx.scratch(DType::kBFloat16, {nb}) : nullptr;
  if (!cb) return ctx.status();
  launchToBf16(a, ca->raw(), na, be.stream());
  launchToBf16(b, cb->raw(), nb, be.stream());
  DW_RETURN_IF_ERROR(launched("bf16 copies of a product's operands"));
  return Operands{ca->raw(), cb->raw(), CUDA_R_16BF};
}

cublasComputeType_t computeType(const CudaBackend& be) {
  return be.math() == Math::kTf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
}

// y_i = alpha op(A_i) op(B_i) + beta y_i for `batches` row-major products whose operands
// (already in the session's precision) lie `sa`, `sb` and `m * n` elements apart (sa or sb 0:
// shared by every product).
Status gemmOn(CudaBackend& be, const Operands& ops, bool ta, bool tb, int64_t m, int64_t n,
              int64_t k, float alpha, float beta, float* y, int64_t batches = 1, int64_t sa = 0,
              int64_t sb = 0) {
  const auto& L = be.libs();
  std::lock_guard<std::mutex> lock(be.ctx().mutex);
  return check(L.cublasGemmStridedBatchedEx(
                   be.ctx().cublas, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                   static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), &alpha, ops.b,
                   ops.type, static_cast<int>(tb ? k : n), sb, ops.a, ops.type,
                   static_cast<int>(ta ? m : k), sa, &beta, y, CUDA_R_32F, static_cast<int>(n),
                   m * n, static_cast<int>(batches), computeType(be), CUBLAS_GEMM_DEFAULT),
               "matrix product");
}

// The same on float operands, converted first where the session computes in bf16.
Status gemm(KernelContext& ctx, CudaBackend& be, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
            float alpha, const float* a, const float* b, float beta, float* y, int64_t batches = 1,
            int64_t sa = 0, int64_t sb = 0) {
  if (m == 0 || n == 0 || batches == 0) return Status();
  auto ops = operands(ctx, be, a, (batches - 1) * sa + m * k, b, (batches - 1) * sb + k * n);
  if (!ops) return ops.status();
  return gemmOn(be, *ops, ta, tb, m, n, k, alpha, beta, y, batches, sa, sb);
}

// One row-major product y (m x n) = alpha op(A) op(B) + beta y and what follows it.
struct Product {
  bool ta = false, tb = false;
  int64_t m = 0, n = 0, k = 0;
  float alpha = 1.f, beta = 0.f;
  const float* a = nullptr;
  const float* b = nullptr;
  float* y = nullptr;
  const float* bias = nullptr;  // n values added to every row, before the activation
  UnaryInstance act;            // fn kCount: none
  // The sum over k of the operand fusion::Fused::biasGradOf names (it is stored k x len).
  float* biasGrad = nullptr;
  int biasGradOf = -1;
};

// The largest power of two up to 256 that divides the address: cuBLASLt's heuristics pick
// only algorithms that can read operands aligned so.
uint32_t alignment(const void* p) {
  const auto v = reinterpret_cast<uintptr_t>(p);
  uint32_t a = 256;
  while (a > 4 && v % a != 0) a /= 2;
  return a;
}

// cuBLASLt's descriptors and chosen algorithm for one shape, epilogue and alignment.
struct LtPlan {
  const Libs* l = nullptr;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, ld = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool found = false;  // false: no algorithm takes this epilogue; the fallback runs
  ~LtPlan() {
    if (la) l->cublasLtMatrixLayoutDestroy(la);
    if (lb) l->cublasLtMatrixLayoutDestroy(lb);
    if (ld) l->cublasLtMatrixLayoutDestroy(ld);
    if (desc) l->cublasLtMatmulDescDestroy(desc);
  }
};

struct Epilogue {
  cublasLtEpilogue_t e = CUBLASLT_EPILOGUE_DEFAULT;
  bool bias = false, act = false, biasGrad = false;  // what it applies
};

Epilogue epilogueOf(const Product& p) {
  Epilogue e;
  if (p.biasGrad) {
    // In cuBLAS's view our A is its B: a sum over our A's k is its B's, and the reverse.
    e.e = p.biasGradOf == 0 ? CUBLASLT_EPILOGUE_BGRADB : CUBLASLT_EPILOGUE_BGRADA;
    e.biasGrad = true;
    return e;
  }
  const bool relu = p.act.fn == ops::UnaryFn::kRelu, gelu = p.act.fn == ops::UnaryFn::kGeluTanh;
  e.bias = p.bias != nullptr;
  e.act = relu || gelu;
  if (e.bias)
    e.e = relu ? CUBLASLT_EPILOGUE_RELU_BIAS
               : (gelu ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_BIAS);
  else if (e.act)
    e.e = relu ? CUBLASLT_EPILOGUE_RELU : CUBLASLT_EPILOGUE_GELU;
  return e;
}

// DEEPWIRE_CUDNN_LOG=1 (the cuda backend's choices log): what became of an epilogue.
void logPlan(const Product& p, const Epilogue& e, const char* what) {
  static const bool on = std::getenv("DEEPWIRE_CUDNN_LOG") != nullptr;
  if (!on) return;
  std::fprintf(stderr, "cuBLASLt m %lld n %lld k %lld ta %d tb %d epilogue %d: %s\n",
               static_cast<long long>(p.m), static_cast<long long>(p.n),
               static_cast<long long>(p.k), int(p.ta), int(p.tb), int(e.e), what);
}

// Builds the plan for `p` (its pointers only for their alignment).
Result<std::unique_ptr<LtPlan>> makePlan(CudaBackend& be, const Product& p, const Operands& o,
                                         const Epilogue& e) {
  const Libs& L = be.libs();
  auto plan = std::make_unique<LtPlan>();
  plan->l = &L;
  DW_CUDA_OK(check(L.cublasLtMatmulDescCreate(&plan->desc, computeType(be), CUDA_R_32F),
                   "a cuBLASLt product descriptor"));
  const cublasOperation_t opA = p.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t opB = p.ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  auto set = [&](cublasLtMatmulDescAttributes_t a, const void* v, size_t bytes) {
    return check(L.cublasLtMatmulDescSetAttribute(plan->desc, a, v, bytes),
                 "a cuBLASLt product attribute");
  };
  DW_CUDA_OK(set(CUBLASLT_MATMUL_DESC_TRANSA, &opA, sizeof opA));
  DW_CUDA_OK(set(CUBLASLT_MATMUL_DESC_TRANSB, &opB, sizeof opB));
  DW_CUDA_OK(set(CUBLASLT_MATMUL_DESC_EPILOGUE, &e.e, sizeof e.e));
  if (e.bias || e.biasGrad) {
    const cudaDataType f32 = CUDA_R_32F;
    DW_CUDA_OK(set(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &f32, sizeof f32));
  }
  // Stored row-major, read column-major: our B (n x k, or k x n) is cuBLAS's A.
  const uint64_t aRows = p.tb ? p.k : p.n, aCols = p.tb ? p.n : p.k;
  const uint64_t bRows = p.ta ? p.m : p.k, bCols = p.ta ? p.k : p.m;
  DW_CUDA_OK(check(L.cublasLtMatrixLayoutCreate(&plan->la, o.type, aRows, aCols, aRows),
                   "a cuBLASLt layout"));
  DW_CUDA_OK(check(L.cublasLtMatrixLayoutCreate(&plan->lb, o.type, bRows, bCols, bRows),
                   "a cuBLASLt layout"));
  DW_CUDA_OK(check(L.cublasLtMatrixLayoutCreate(&plan->ld, CUDA_R_32F, p.n, p.m, p.n),
                   "a cuBLASLt layout"));
  cublasLtMatmulPreference_t pref = nullptr;
  DW_CUDA_OK(check(L.cublasLtMatmulPreferenceCreate(&pref), "a cuBLASLt preference"));
  const uint64_t room = DeviceContext::kLtWorkspaceBytes;
  const uint32_t al[4] = {alignment(o.b), alignment(o.a), alignment(p.y), alignment(p.y)};
  const cublasLtMatmulPreferenceAttributes_t which[4] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  cublasStatus_t st = L.cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &room, sizeof room);
  for (int i = 0; i < 4 && st == CUBLAS_STATUS_SUCCESS; ++i)
    st = L.cublasLtMatmulPreferenceSetAttribute(pref, which[i], &al[i], sizeof al[i]);
  cublasLtMatmulHeuristicResult_t result{};
  int count = 0;
  if (st == CUBLAS_STATUS_SUCCESS)
    st = L.cublasLtMatmulAlgoGetHeuristic(be.ctx().lt, plan->desc, plan->la, plan->lb, plan->ld,
                                          plan->ld, pref, 1, &result, &count);
  L.cublasLtMatmulPreferenceDestroy(pref);
  // An epilogue no algorithm supports (NOT_SUPPORTED, or none returned) is not an error: the
  // product then runs without it.
  plan->found = st == CUBLAS_STATUS_SUCCESS && count > 0;
  if (plan->found) plan->algo = result.algo;
  logPlan(p, e, plan->found ? "an algorithm" : "none; separate passes follow the product");
  return plan;
}

// Runs `p`: in one cuBLASLt call where its epilogue has an algorithm, else as a plain product
// followed by separate passes for the bias, the activation and the bias gradient.
class Products {
 public:
  Status run(KernelContext& ctx, CudaBackend& be, const Product& p) {
    if (p.m == 0 || p.n == 0) return Status();
    const Epilogue e = epilogueOf(p);
    auto o = operands(ctx, be, p.a, p.m * p.k, p.b, p.k * p.n);
    if (!o) return o.status();
    // An empty sum (k 0) takes the plain product, which writes beta y.
    if (e.e != CUBLASLT_EPILOGUE_DEFAULT && p.k > 0) {
      const auto key =
          std::make_tuple(p.ta, p.tb, p.m, p.n, p.k, p.beta != 0.f, static_cast<int>(e.e),
                          alignment(o->a), alignment(o->b), alignment(p.y));
      std::lock_guard<std::mutex> lock(be.ctx().mutex);
      auto it = plans_.find(key);
      if (it == plans_.end()) {
        auto made = makePlan(be, p, *o, e);
        if (!made) return made.status();
        it = plans_.emplace(key, std::move(*made)).first;
      }
      LtPlan& plan = *it->second;
      if (plan.found) {
        const Libs& L = be.libs();
        const void* vec = e.biasGrad ? static_cast<const void*>(p.biasGrad) : p.bias;
        cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
        if (vec)
          st = L.cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &vec,
                                                sizeof vec);
        if (st == CUBLAS_STATUS_SUCCESS)
          st = L.cublasLtMatmul(be.ctx().lt, plan.desc, &p.alpha, o->b, plan.la, o->a, plan.lb,
                                &p.beta, p.y, plan.ld, p.y, plan.ld, &plan.algo,
                                be.ctx().ltWorkspace->data, DeviceContext::kLtWorkspaceBytes,
                                be.stream());
        if (st == CUBLAS_STATUS_SUCCESS) return after(be, p, e);
        // cuBLASLt checks its arguments before it queues anything: a refusal leaves y as it
        // was, and this shape takes the plain product from now on.
        plan.found = false;
        logPlan(p, e, "refused at launch; separate passes follow the product");
      }
    }
    DW_RETURN_IF_ERROR(gemmOn(be, *o, p.ta, p.tb, p.m, p.n, p.k, p.alpha, p.beta, p.y));
    return after(be, p, Epilogue{});
  }

  // What the epilogue `done` left of p's bias, activation and bias gradient, as passes over y
  // (rows of n values, batched products stacked) and over the dY operand.
  static Status after(CudaBackend& be, const Product& p, const Epilogue& done, int64_t rows = 0) {
    const int64_t r = rows ? rows : p.m, count = r * p.n;
    if (p.bias && !done.bias) {
      const Shape rowsOfN{r, p.n};
      launchBinary(ops::BinaryFn::kAdd, ElemType::kFloat, p.y, contiguousOf(rowsOfN), p.bias,
                   broadcastStrides({p.n}, rowsOfN), p.y, count, be.stream());
      DW_RETURN_IF_ERROR(launched("a product's bias"));
    }
    if (p.act.fn != ops::UnaryFn::kCount && !done.act) {
      launchUnary(p.act.fn, p.act.params, p.y, p.y, count, be.stream());
      DW_RETURN_IF_ERROR(launched("a product's activation"));
    }
    if (p.biasGrad && !done.biasGrad) {
      const int64_t len = p.biasGradOf == 0 ? p.m : p.n;
      Strided kept, red;
      kept.rank = red.rank = 1;
      kept.dims[0] = len;
      kept.strides[0] = 1;
      red.dims[0] = p.k;
      red.strides[0] = len;
      launchReduce(ReduceOp::kSum, p.biasGradOf == 0 ? p.a : p.b, kept, red, p.biasGrad, len, p.k,
                   be.stream());
      DW_RETURN_IF_ERROR(launched("a bias gradient"));
    }
    return Status();
  }

 private:
  std::map<
      std::tuple<bool, bool, int64_t, int64_t, int64_t, bool, int, uint32_t, uint32_t, uint32_t>,
      std::unique_ptr<LtPlan>>
      plans_;
};

class Gemm : public Kernel {
 public:
  explicit Gemm(const KernelInit& init)
      : ta_(init.attrs.getInt("transA") != 0),
        tb_(init.attrs.getInt("transB") != 0),
        alpha_(init.attrs.getFloat("alpha")),
        beta_(init.attrs.getFloat("beta")) {
    const fusion::Fused f = fusion::fusedOf(init.attrs);
    if (auto u = fusion::activationOf(f))
      act_ = *u;
    else
      fail("cuda Gemm: " + u.message());
    biasGradOf_ = f.biasGradOf;
    if ((biasGradOf_ == 0 && !ta_) || (biasGradOf_ == 1 && tb_) || biasGradOf_ > 1)
      fail("cuda Gemm: the fused bias gradient needs its operand stored k x len");
  }
  Status compute(KernelContext& ctx) override {
    const Tensor& a = ctx.input(0);
    const Tensor& b = ctx.input(1);
    if (a.rank() != 2 || b.rank() != 2) return Status::error("Gemm: A and B must be matrices");
    Product p;
    p.ta = ta_;
    p.tb = tb_;
    p.m = ta_ ? a.dim(1) : a.dim(0);
    p.k = ta_ ? a.dim(0) : a.dim(1);
    p.n = tb_ ? b.dim(0) : b.dim(1);
    const int64_t kb = tb_ ? b.dim(1) : b.dim(0);
    if (p.k != kb)
      return Status::error("Gemm: inner dimensions differ (" + shapeToString(a.shape()) + " and " +
                           shapeToString(b.shape()) + ")");
    auto& be = cudaBackend(ctx.backend());
    DW_ALLOC(y, ctx.output(0, DType::kFloat, {p.m, p.n}));
    p.alpha = alpha_;
    p.a = fp(a);
    p.b = fp(b);
    p.y = y->data<float>();
    p.act = act_;
    if (ctx.hasInput(2) && beta_ != 0.f) {
      const Tensor& c = ctx.input(2);
      auto bs = broadcastShapes({c.shape(), y->shape()});
      if (!bs || *bs != y->shape())
        return Status::error("Gemm: C of shape " + shapeToString(c.shape()) +
                             " does not broadcast to " + shapeToString(y->shape()));
      if (beta_ == 1.f && c.size() == p.n && c.rank() >= 1 && c.dim(c.rank() - 1) == p.n) {
        p.bias = fp(c);  // a bias per column: the epilogue's
      } else {
        launchStridedCopy(c.raw(), broadcastStrides(c.shape(), y->shape()), y->raw(), y->size(), 4,
                          be.stream());
        DW_RETURN_IF_ERROR(launched("Gemm bias"));
        p.beta = beta_;
      }
    }
    if (biasGradOf_ >= 0) {
      DW_ALLOC(g, ctx.output(1, DType::kFloat, {biasGradOf_ == 0 ? p.m : p.n}));
      p.biasGrad = g->data<float>();
      p.biasGradOf = biasGradOf_;
    }
    return products_.run(ctx, be, p);
  }

 private:
  bool ta_, tb_;
  float alpha_, beta_;
  UnaryInstance act_;  // fn kCount: none
  int biasGradOf_ = -1;
  Products products_;
};

// MatMul, and the bias (input 2: a vector along the last axis) and activation that the fusion
// pass folded into it from a Linear layer's Add and what followed.
class MatMul : public Kernel {
 public:
  explicit MatMul(const KernelInit& init) {
    if (auto u = fusion::activationOf(fusion::fusedOf(init.attrs)))
      act_ = *u;
    else
      fail("cuda MatMul: " + u.message());
  }
  Status compute(KernelContext& ctx) override {
    const Tensor& a = ctx.input(0);
    const Tensor& b = ctx.input(1);
    if (a.rank() == 0 || b.rank() == 0) return Status::error("MatMul: scalar operands");
    Shape sa = a.shape(), sb = b.shape();
    const bool va = sa.size() == 1, vb = sb.size() == 1;
    if (va) sa.insert(sa.begin(), 1);
    if (vb) sb.push_back(1);
    const int64_t m = sa[sa.size() - 2], k = sa.back(), n = sb.back();
    if (sb[sb.size() - 2] != k)
      return Status::error("MatMul: inner dimensions differ (" + shapeToString(a.shape()) +
                           " and " + shapeToString(b.shape()) + ")");
    Shape ba(sa.begin(), sa.end() - 2), bb(sb.begin(), sb.end() - 2);
    auto batch = broadcastShapes({ba, bb});
    if (!batch) return batch.status();
    Shape out = *batch;
    if (!va) out.push_back(m);
    if (!vb) out.push_back(n);
    DW_ALLOC(y, ctx.output(0, DType::kFloat, out));
    auto& be = cudaBackend(ctx.backend());
    const int64_t batches = numElements(*batch);
    Product p;
    p.m = m;
    p.n = n;
    p.k = k;
    p.a = fp(a);
    p.b = fp(b);
    p.y = y->data<float>();
    p.act = act_;
    if (ctx.hasInput(2)) {
      if (ctx.input(2).size() != n)
        return Status::error("MatMul: the fused bias has " + std::to_string(ctx.input(2).size()) +
                             " values, expected " + std::to_string(n));
      p.bias = fp(ctx.input(2));
    }
    // B shared by every batch: one product with the batches stacked as rows of A.
    if (numElements(bb) == 1 && ba == *batch) {
      p.m = batches * m;
      return products_.run(ctx, be, p);
    }
    if (ba == bb) {
      DW_RETURN_IF_ERROR(
          gemm(ctx, be, false, false, m, n, k, 1.f, p.a, p.b, 0.f, p.y, batches, m * k, k * n));
    } else {
      // General broadcasting of the batch dimensions: one product per batch.
      const Strided sA = broadcastStrides(ba, *batch), sB = broadcastStrides(bb, *batch);
      for (int64_t i = 0; i < batches; ++i) {
        int64_t oa = 0, ob = 0, r = i;
        for (int d = sA.rank - 1; d >= 0; --d) {
          const int64_t c = r % sA.dims[d];
          r /= sA.dims[d];
          oa += c * sA.strides[d];
          ob += c * sB.strides[d];
        }
        DW_RETURN_IF_ERROR(gemm(ctx, be, false, false, m, n, k, 1.f, p.a + oa * m * k,
                                p.b + ob * k * n, 0.f, p.y + i * m * n));
      }
    }
    return Products::after(be, p, Epilogue{}, batches * m);
  }

 private:
  UnaryInstance act_;
  Products products_;
};

}  // namespace

void addMatMulKernels(KernelRegistry& r) {
  add<Gemm>(r, "Gemm", &floatInputs);
  add<MatMul>(r, "MatMul", &floatInputs);
}

}  // namespace dw::engine::cuda
