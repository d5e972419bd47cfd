// Batch invariance, bit for bit: a row's result does not depend on what else is in the call. For
// every matmul kernel table this CPU runs and every weight format, each activation row of an
// n-row MatMul (GEMV, the small-batch tiles, GEMM; with and without threads; plain and
// accumulating) equals the one-row call on that row alone. For every attention table and KV
// format, each query position of an S-row causal call equals the one-row (decode) call at its
// position, on 1 to 3 threads. These are the kernels' half of "the same answer alone as in a
// batch" and of speculative decoding's exactness (issue: draft-free speculative decoding).
#include <gtest/gtest.h>

#include <cctype>
#include <cstring>
#include <string>
#include <vector>

#include "phi4mm/base/thread_pool.h"
#include "phi4mm/kernels/attention.h"
#include "phi4mm/kernels/isa.h"
#include "phi4mm/kernels/weight_matrix.h"
#include "test_util.h"

namespace phi4mm {
namespace {

bool SameBits(const float* a, const float* b, int64_t n) { return std::memcmp(a, b, static_cast<size_t>(n) * 4) == 0; }

const WeightFormat kFormats[] = {WeightFormat::kF32, WeightFormat::kBF16, WeightFormat::kF16, WeightFormat::kQ8_0,
                                 WeightFormat::kQ4K};

// One test per table (they shard and run in parallel apart: each is a large share of the kernel
// tests under QEMU).
class BatchInvarianceMatMul : public ::testing::TestWithParam<const MatMulKernels*> {};

TEST_P(BatchInvarianceMatMul, EveryRowEqualsItsOneRowCall) {
  ThreadPool pool(3);
  const MatMulKernels* k = GetParam();
  for (WeightFormat f : kFormats) {
    SCOPED_TRACE(std::string(k->name) + " " + WeightFormatName(f));
    bool differs = false;
    for (int64_t rows : {1, 5, 33, 130}) {
      for (int64_t cols : {32, 96, 300, 1000}) {
        auto base = WeightMatrix::FromF32(test::GaussianWithOutliers(static_cast<size_t>(rows * cols),
                                                                     static_cast<uint32_t>(rows + cols), 0.05f),
                                          rows, cols)
                        .Quantize(f);
        ASSERT_TRUE(base.ok());
        const WeightMatrix w = *base->ForKernels(*k);
        for (int64_t n : {2, 3, 4, 5, 7, 8, 9, 16, 17, 40}) {
          const std::vector<float> x =
              test::GaussianWithOutliers(static_cast<size_t>(n * cols), static_cast<uint32_t>(n * 31 + cols));
          for (bool accumulate : {false, true}) {
            for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
              std::vector<float> many(static_cast<size_t>(n * rows), 0.25f), one(static_cast<size_t>(rows));
              w.MatMulWith(*k, x.data(), n, many.data(), p, accumulate);
              for (int64_t i = 0; i < n; ++i) {
                std::fill(one.begin(), one.end(), 0.25f);
                w.MatMulWith(*k, x.data() + i * cols, 1, one.data(), p, accumulate);
                if (differs) break;
                differs = !SameBits(many.data() + i * rows, one.data(), rows);
                EXPECT_FALSE(differs) << k->name << " " << WeightFormatName(f) << " rows=" << rows << " cols=" << cols
                                      << " n=" << n << " row " << i << (accumulate ? " accumulate" : "")
                                      << (p ? " threads" : "");
              }
            }
          }
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Tables, BatchInvarianceMatMul, ::testing::ValuesIn(AvailableKernels()),
                         [](const ::testing::TestParamInfo<const MatMulKernels*>& info) {
                           std::string name = info.param->name;
                           for (char& c : name)
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           return name;
                         });

// Each position of an S-row causal call equals the one-row call at that position (what a decode
// step computes), for every attention table, KV format, path and thread count; long pasts cross
// the slice boundaries (kSliceKeys 256) and the key tiles (64).
TEST(BatchInvariance, EveryAttentionRowEqualsItsDecodeCall) {
  namespace ai = attention_internal;
  std::vector<const ai::RowKernels*> tables = {&ai::ScalarRowKernels()};
  for (Isa isa : AvailableIsas())
    if (&ai::RowKernelsFor(isa) != tables.back()) tables.push_back(&ai::RowKernelsFor(isa));
  ThreadPool pool2(2), pool3(3);
  // G = 3; head_dim 20 (padded to 24 in the tiles) and 16 (decode's tiles read the cache itself).
  for (const AttentionShape sh : {AttentionShape{6, 2, 20, 0.2236f}, AttentionShape{6, 2, 16, 0.25f}})
  for (const ai::RowKernels* rk : tables) {
    for (KvDType dt : {KvDType::kF32, KvDType::kF16, KvDType::kQ8}) {
      for (int64_t past : {0, 5, 63, 250, 600}) {
        const int64_t S = 13, total = past + S, row = KvRowBytes(dt, sh.n_kv_heads, sh.head_dim);
        const std::vector<float> kf =
            test::GaussianWithOutliers(static_cast<size_t>(total * sh.n_kv_heads * sh.head_dim), 7 + past);
        const std::vector<float> vf =
            test::GaussianWithOutliers(static_cast<size_t>(total * sh.n_kv_heads * sh.head_dim), 9 + past);
        std::vector<uint8_t> k(static_cast<size_t>(total * row)), v(k.size());
        for (int64_t t = 0; t < total; ++t) {
          StoreKvRow(dt, kf.data() + t * sh.n_kv_heads * sh.head_dim, sh.n_kv_heads, sh.head_dim, k.data() + t * row);
          StoreKvRow(dt, vf.data() + t * sh.n_kv_heads * sh.head_dim, sh.n_kv_heads, sh.head_dim, v.data() + t * row);
        }
        const KvView kv{k.data(), v.data(), dt};
        const int64_t width = sh.n_heads * sh.head_dim;
        const std::vector<float> q = test::GaussianWithOutliers(static_cast<size_t>(S * width), 11 + past);
        for (ai::Path path : {ai::Path::kAuto, ai::Path::kFlash, ai::Path::kRows}) {
          for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool2, &pool3}) {
            std::vector<float> many(static_cast<size_t>(S * width)), one(static_cast<size_t>(width));
            ai::CausalAttentionWith(*rk, path, q.data(), kv, past, S, sh, many.data(), p);
            for (int64_t s = 0; s < S; ++s) {
              ai::CausalAttentionWith(*rk, ai::Path::kAuto, q.data() + s * width, kv, past + s, 1, sh, one.data(), &pool2);
              ASSERT_TRUE(SameBits(many.data() + s * width, one.data(), width))
                  << "table " << (rk == tables[0] ? "scalar" : "simd") << " head_dim " << sh.head_dim << " kv "
                  << KvDTypeName(dt) << " past " << past << " position " << s << " path " << static_cast<int>(path)
                  << (p ? " threads" : "");
            }
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace phi4mm
