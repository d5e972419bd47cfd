// CausalAttention against a naive double-precision reference on odd shapes (query counts, cached
// lengths, head dims that are not multiples of 8, 1 to 4 query heads per KV head), for every
// KV-cache element type, both kernel tables (scalar and AVX2), both paths (flash tiles and rows,
// split over threads or not); the flash tile kernels against the scalar ones on their own; and the
// 8-bit row format (round trip within half a step, zero rows, size).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "phi4mm/base/half.h"
#include "phi4mm/kernels/attention.h"
#include "phi4mm/kernels/isa.h"
#include "phi4mm/kernels/speech_ops.h"
#include "phi4mm/base/thread_pool.h"
#include "test_util.h"

namespace phi4mm {
namespace {

namespace ai = attention_internal;

// A cache of T rows of [nkv, hd] in `dt`, and the float values it stands for.
struct Cache {
  Cache(KvDType dt, const std::vector<float>& x, int64_t T, int64_t nkv, int64_t hd) : dt(dt) {
    const size_t rb = KvRowBytes(dt, nkv, hd);
    bytes.resize(T * rb);
    values.resize(x.size());
    for (int64_t t = 0; t < T; ++t) {
      uint8_t* row = bytes.data() + t * rb;
      StoreKvRow(dt, x.data() + t * nkv * hd, nkv, hd, row);
      for (int64_t i = 0; i < nkv * hd; ++i) {
        float& v = values[t * nkv * hd + i];
        if (dt == KvDType::kF32) std::memcpy(&v, row + 4 * i, 4);
        else if (dt == KvDType::kF16) {
          uint16_t h;
          std::memcpy(&h, row + 2 * i, 2);
          v = F16ToF32(h);
        } else {
          // Each head's int8 values, then its scale.
          const uint8_t* head = row + (i / hd) * KvHeadBytes(dt, hd);
          float s;
          std::memcpy(&s, head + hd, 4);
          v = static_cast<float>(static_cast<int8_t>(head[i % hd])) * s;
        }
      }
    }
  }
  KvDType dt;
  std::vector<uint8_t> bytes;
  std::vector<float> values;
};

std::vector<double> Naive(const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
                          int64_t past, int64_t S, const AttentionShape& sh) {
  const int64_t nh = sh.n_heads, nkv = sh.n_kv_heads, hd = sh.head_dim, G = nh / nkv;
  std::vector<double> out(S * nh * hd, 0.0);
  for (int64_t s = 0; s < S; ++s)
    for (int64_t h = 0; h < nh; ++h) {
      const int64_t g = h / G, len = past + s + 1;
      std::vector<double> p(len);
      double mx = -1e300, sum = 0;
      for (int64_t t = 0; t < len; ++t) {
        double dot = 0;
        for (int64_t d = 0; d < hd; ++d) dot += double{q[(s * nh + h) * hd + d]} * k[(t * nkv + g) * hd + d];
        p[t] = dot * sh.scale;
        mx = std::max(mx, p[t]);
      }
      for (double& x : p) sum += (x = std::exp(x - mx));
      for (int64_t t = 0; t < len; ++t)
        for (int64_t d = 0; d < hd; ++d) out[(s * nh + h) * hd + d] += p[t] / sum * v[(t * nkv + g) * hd + d];
    }
  return out;
}

// The row table of every ISA this CPU offers (the dispatch point's list), scalar first, each once.
std::vector<const ai::RowKernels*> Tables() {
  std::vector<const ai::RowKernels*> t;
  for (Isa isa : AvailableIsas())
    if (std::find(t.begin(), t.end(), &ai::RowKernelsFor(isa)) == t.end()) t.push_back(&ai::RowKernelsFor(isa));
  return t;
}

struct Shape {
  int64_t past, S, heads, kv_heads, hd;
};

TEST(AttentionFlash, MatchesNaiveReferenceOnOddShapes) {
  ThreadPool pool1(1), pool3(3);
  const Shape shapes[] = {{0, 1, 3, 1, 8},     {0, 7, 2, 2, 5},     {5, 3, 8, 2, 13},   {0, 70, 6, 2, 20},
                          {130, 17, 12, 3, 72}, {3, 65, 4, 1, 128},  {64, 64, 3, 3, 9},  {200, 2, 9, 3, 33},
                          {1, 40, 8, 4, 16},   {0, 129, 3, 1, 24}};
  for (const Shape& c : shapes) {
    const AttentionShape sh{c.heads, c.kv_heads, c.hd, 1.0f / std::sqrt(static_cast<float>(c.hd))};
    const int64_t T = c.past + c.S;
    const auto q = test::Gaussian(c.S * c.heads * c.hd, 1, 1.5f);
    const auto kx = test::Gaussian(T * c.kv_heads * c.hd, 2, 1.5f), vx = test::Gaussian(T * c.kv_heads * c.hd, 3);
    for (KvDType dt : {KvDType::kF32, KvDType::kF16, KvDType::kQ8}) {
      const Cache k(dt, kx, T, c.kv_heads, c.hd), v(dt, vx, T, c.kv_heads, c.hd);
      const std::vector<double> want = Naive(q, k.values, v.values, c.past, c.S, sh);
      for (const ai::RowKernels* rk : Tables())
        for (ai::Path path : {ai::Path::kFlash, ai::Path::kRows, ai::Path::kAuto})
          for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &pool1, &pool3}) {
            std::vector<float> got(q.size(), NAN);
            ai::CausalAttentionWith(*rk, path, q.data(), KvView{k.bytes.data(), v.bytes.data(), dt}, c.past, c.S, sh,
                                    got.data(), pool);
            for (size_t i = 0; i < got.size(); ++i)
              ASSERT_NEAR(got[i], want[i], 2e-5)
                  << KvDTypeName(dt) << (rk == &ai::ScalarRowKernels() ? " scalar" : " simd") << " path "
                  << static_cast<int>(path) << " past " << c.past << " S " << c.S << " G " << c.heads / c.kv_heads
                  << " hd " << c.hd << " i " << i;
          }
    }
  }
}

// A batched decoder step hands every sequence's attention over in one call: each job's output
// must be bit for bit what its own call gives, whatever else is in the batch. Jobs of decode size
// (one and two queries) share the row path's dispatch, one of them long enough to be split over the
// pool's threads; a prefill-sized job takes the flash path on its own; one job has no past.
TEST(AttentionBatch, EachJobEqualsItsOwnCall) {
  ThreadPool pool3(3);
  const int64_t heads = 6, kv_heads = 2, hd = 40;
  const AttentionShape sh{heads, kv_heads, hd, 1.0f / std::sqrt(static_cast<float>(hd))};
  const std::pair<int64_t, int64_t> past_s[] = {{5, 1}, {700, 1}, {33, 2}, {0, 1}, {90, 12}, {257, 1}};
  for (KvDType dt : {KvDType::kF32, KvDType::kF16, KvDType::kQ8})
    for (const ai::RowKernels* rk : Tables())
      for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &pool3}) {
        std::vector<Cache> ks, vs;
        std::vector<std::vector<float>> qs, alone, batched;
        std::vector<AttentionJob> jobs;
        for (size_t j = 0; j < std::size(past_s); ++j) {
          const auto [past, S] = past_s[j];
          const int64_t T = past + S;
          ks.emplace_back(dt, test::Gaussian(T * kv_heads * hd, 10 + j, 1.5f), T, kv_heads, hd);
          vs.emplace_back(dt, test::Gaussian(T * kv_heads * hd, 20 + j), T, kv_heads, hd);
          qs.push_back(test::Gaussian(S * heads * hd, 30 + j, 1.5f));
          alone.emplace_back(qs.back().size(), NAN);
          batched.emplace_back(qs.back().size(), NAN);
        }
        for (size_t j = 0; j < std::size(past_s); ++j) {
          const KvView kv{ks[j].bytes.data(), vs[j].bytes.data(), dt};
          ai::CausalAttentionWith(*rk, ai::Path::kAuto, qs[j].data(), kv, past_s[j].first, past_s[j].second, sh,
                                  alone[j].data(), pool);
          jobs.push_back({qs[j].data(), kv, past_s[j].first, past_s[j].second, batched[j].data()});
        }
        ai::CausalAttentionWith(*rk, ai::Path::kAuto, jobs, sh, pool);
        for (size_t j = 0; j < std::size(past_s); ++j)
          for (size_t i = 0; i < alone[j].size(); ++i)
            ASSERT_EQ(batched[j][i], alone[j][i])
                << KvDTypeName(dt) << " job " << j << " i " << i << (pool ? " pool" : " no pool");
      }
}

TEST(AttentionFlash, EveryTableTileKernelsMatchScalar) {
  const std::vector<const ai::RowKernels*> tables = Tables();
  if (tables.size() < 2) GTEST_SKIP() << "this CPU offers only the scalar row table";
  for (size_t ti = 1; ti < tables.size(); ++ti) {
  const ai::RowKernels &s = ai::ScalarRowKernels(), &a = *tables[ti];
  SCOPED_TRACE(ti);
  constexpr int64_t lds = 64;
  for (int64_t hdp : {8, 16, 24, 40, 128})
    for (int64_t n : {1, 2, 3, 4, 7, 8, 9, 31, 64})
      for (int64_t rows : {4, 8, 12}) {
        const auto q = test::Gaussian(rows * hdp, 7), k = test::Gaussian(n * hdp, 8), v = test::Gaussian(n * hdp, 9);
        std::vector<float> s1(rows * lds, 0.0f), s2(rows * lds, 0.0f);
        s.tile_qk(q.data(), rows, k.data(), n, hdp, s1.data(), lds);
        a.tile_qk(q.data(), rows, k.data(), n, hdp, s2.data(), lds);
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t t = 0; t < n; ++t) ASSERT_NEAR(s1[r * lds + t], s2[r * lds + t], 1e-4) << hdp << " " << n;
        // The same scores into both softmaxes; mask a few (row 1 entirely); a finite running max on odd rows.
        s2 = s1;
        for (int64_t t = 0; t < n; ++t) s1[1 * lds + t] = s2[1 * lds + t] = -INFINITY;
        s1[2 * lds + n - 1] = s2[2 * lds + n - 1] = -INFINITY;
        std::vector<float> m1(rows), l1(rows), o1 = test::Gaussian(rows * hdp, 10);
        for (int64_t r = 0; r < rows; ++r) {
          m1[r] = r % 2 ? 0.5f : -INFINITY;
          l1[r] = r % 2 ? 2.0f : 0.0f;
        }
        std::vector<float> m2 = m1, l2 = l1, o2 = o1;
        s.tile_softmax(s1.data(), lds, rows, n, m1.data(), l1.data(), o1.data(), hdp);
        a.tile_softmax(s2.data(), lds, rows, n, m2.data(), l2.data(), o2.data(), hdp);
        for (int64_t r = 0; r < rows; ++r) {
          ASSERT_EQ(m1[r], m2[r]);
          ASSERT_NEAR(l1[r], l2[r], 1e-5 * std::max(1.0f, l1[r]));
          for (int64_t t = 0; t < n; ++t) ASSERT_NEAR(s1[r * lds + t], s2[r * lds + t], 1e-6) << r << " " << t;
        }
        for (size_t i = 0; i < o1.size(); ++i) ASSERT_NEAR(o1[i], o2[i], 1e-5);
        s.tile_pv(s1.data(), lds, rows, v.data(), n, hdp, o1.data());
        a.tile_pv(s2.data(), lds, rows, v.data(), n, hdp, o2.data());
        for (size_t i = 0; i < o1.size(); ++i) ASSERT_NEAR(o1[i], o2[i], 1e-4);
      }
  // Widening: every element type, head dims with tails, padding columns zeroed.
  for (int64_t hd : {5, 8, 13, 72}) {
    const int64_t nkv = 3, n = 5, hdp = (hd + 7) / 8 * 8;
    const auto x = test::Gaussian(n * nkv * hd, 11);
    for (KvDType dt : {KvDType::kF32, KvDType::kF16, KvDType::kQ8}) {
      const Cache c(dt, x, n, nkv, hd);
      const int64_t rb = static_cast<int64_t>(KvRowBytes(dt, nkv, hd));
      for (int64_t g = 0; g < nkv; ++g) {
        std::vector<float> w1(n * hdp, NAN), w2(n * hdp, NAN);
        const uint8_t* base = c.bytes.data();
        for (const ai::RowKernels* rk : {&s, &a}) {
          float* w = rk == &s ? w1.data() : w2.data();
          if (dt == KvDType::kF32)
            rk->widen_f32(reinterpret_cast<const float*>(base) + g * hd, rb / 4, n, hd, hdp, w);
          else if (dt == KvDType::kF16)
            rk->widen_f16(reinterpret_cast<const uint16_t*>(base) + g * hd, rb / 2, n, hd, hdp, w);
          else
            rk->widen_q8(reinterpret_cast<const int8_t*>(base) + g * (hd + 4), base + g * (hd + 4) + hd, rb, n, hd, hdp,
                         w);
        }
        for (int64_t t = 0; t < n; ++t)
          for (int64_t d = 0; d < hdp; ++d) {
            const float want = d < hd ? c.values[(t * nkv + g) * hd + d] : 0.0f;
            ASSERT_EQ(w1[t * hdp + d], want);
            ASSERT_EQ(w2[t * hdp + d], want);
          }
      }
    }
  }
  }
}

TEST(AttentionQ8, RowFormatRoundTripsWithinHalfAStep) {
  const int64_t nkv = 3, hd = 37;
  EXPECT_EQ(KvRowBytes(KvDType::kQ8, nkv, hd), static_cast<size_t>(nkv * hd + 4 * nkv));
  EXPECT_EQ(KvRowBytes(KvDType::kF16, nkv, hd), static_cast<size_t>(2 * nkv * hd));
  EXPECT_EQ(KvRowBytes(KvDType::kF32, nkv, hd), static_cast<size_t>(4 * nkv * hd));
  EXPECT_EQ(KvHeadBytes(KvDType::kQ8, hd), static_cast<size_t>(hd + 4));
  std::vector<float> x = test::Gaussian(nkv * hd, 12, 3.0f);
  std::fill(x.begin() + hd, x.begin() + 2 * hd, 0.0f);  // an all-zero head row
  const Cache c(KvDType::kQ8, x, 1, nkv, hd);
  for (int64_t h = 0; h < nkv; ++h) {
    float amax = 0;
    for (int64_t i = 0; i < hd; ++i) amax = std::max(amax, std::fabs(x[h * hd + i]));
    for (int64_t i = 0; i < hd; ++i) {
      const float step = amax / 127.0f;
      EXPECT_LE(std::fabs(c.values[h * hd + i] - x[h * hd + i]), 0.5f * step * (1 + 1e-5f) + 1e-30f);
      if (std::fabs(x[h * hd + i]) == amax) {
        EXPECT_NEAR(c.values[h * hd + i], x[h * hd + i], 1e-6f * amax);
      }
    }
  }
  for (int64_t i = hd; i < 2 * hd; ++i) EXPECT_EQ(c.values[i], 0.0f);
  EXPECT_EQ(ParseKvDType("q8"), KvDType::kQ8);
  EXPECT_STREQ(KvDTypeName(KvDType::kQ8), "q8");
  EXPECT_FALSE(ParseKvDType("q4").has_value());
}


// The speech encoder's attention (speech_ops.h) runs on the row kernels of the process's ISA (CI
// runs this with the best table and with PHI4MM_ISA=scalar): against a double-precision reference,
// with and without the relative bias and the mask, a query with no allowed key (zeros), and
// lengths that leave a partial group of queries.
TEST(SpeechAttention, RelBiasMatchesNaiveReference) {
  ThreadPool pool(3);
  for (int64_t L : {1, 5, 16, 37}) {
    for (int variant = 0; variant < 3; ++variant) {
      const int64_t H = 3, D = 24, W = H * D;
      const std::vector<float> q = test::Gaussian(static_cast<size_t>(L * W), 11 + static_cast<uint32_t>(L), 1.0f);
      const std::vector<float> k = test::Gaussian(static_cast<size_t>(L * W), 23 + static_cast<uint32_t>(L), 1.0f);
      const std::vector<float> v = test::Gaussian(static_cast<size_t>(L * W), 37 + static_cast<uint32_t>(L), 1.0f);
      const std::vector<float> bias = test::Gaussian(static_cast<size_t>(H * (2 * L - 1)), 5, 2.0f);
      std::vector<uint8_t> allowed(static_cast<size_t>(L * L));
      for (int64_t i = 0; i < L; ++i)
        for (int64_t j = 0; j < L; ++j) {
          allowed[i * L + j] = (j / 4 <= i / 4 + 1) && i != 2;  // chunks of 4; query 2 sees no key
        }
      const bool use_bias = variant != 1, use_mask = variant != 0;
      RelBiasAttentionShape shape;
      shape.seq = L;
      shape.n_heads = H;
      shape.head_dim = D;
      shape.scale = 0.2f;
      std::vector<float> out(static_cast<size_t>(L * W), 7.0f);
      RelBiasSelfAttention(q.data(), k.data(), v.data(), use_bias ? bias.data() : nullptr,
                           use_mask ? allowed.data() : nullptr, shape, out.data(), variant == 2 ? &pool : nullptr);
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < L; ++i) {
          std::vector<double> p(static_cast<size_t>(L), 0.0);
          double mx = -1e300;
          bool any = false;
          for (int64_t j = 0; j < L; ++j) {
            if (use_mask && !allowed[i * L + j]) continue;
            double dot = 0;
            for (int64_t d = 0; d < D; ++d) dot += double{q[i * W + h * D + d]} * k[j * W + h * D + d];
            p[j] = dot * shape.scale + (use_bias ? bias[h * (2 * L - 1) + (j - i + L - 1)] : 0.0);
            mx = std::max(mx, p[j]);
            any = true;
          }
          double sum = 0;
          for (int64_t j = 0; j < L; ++j) {
            p[j] = (use_mask && !allowed[i * L + j]) ? 0.0 : std::exp(p[j] - mx);
            sum += p[j];
          }
          for (int64_t d = 0; d < D; ++d) {
            double want = 0;
            if (any)
              for (int64_t j = 0; j < L; ++j) want += p[j] / sum * v[j * W + h * D + d];
            ASSERT_NEAR(out[i * W + h * D + d], want, 2e-5)
                << "L=" << L << " variant=" << variant << " h=" << h << " i=" << i;
          }
        }
    }
  }
}

}  // namespace
}  // namespace phi4mm
