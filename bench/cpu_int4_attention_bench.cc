// cpu_int4_attention_bench: the CPU backend's int4_kivi attention kernels alone on one thread
// (int4_attention.h): a KV head's scores against the keys of a context read in place from
// the packed blocks (dequantized, rotated to their positions, dotted with the group's queries)
// and the values' weighted sums, for every instruction set the processor has. The context is
// --regions separate runs of --context positions in pool blocks scattered over one pool (s4kv-tiny
// at 2,048: 6 layers x 2 KV heads, each its own blocks, as a decode step reads them), head_dim
// 128, keys before RoPE. Correctness first: every instruction set's scores and sums must equal
// the scalar reference's bit for bit on the first region. Then a warm-up and --repeats timed
// passes over every region; prints the median's nanoseconds per position (all queries).
//
//   build/bench/cpu_int4_attention_bench [--queries 1 2 4 7] [--context 2048] [--regions 12]
//       [--block-size 64] [--value-group-size 32] [--repeats 21] [--json OUT]
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/int4_attention.h"
#include "backend/cpu/rope.h"
#include "backend/rope_table.h"
#include "common/half.h"
#include "common/json.h"
#include "kv/int4_kivi_layout.h"

namespace {

using s4kv::backend::cpu::CpuIsa;
constexpr int kD = 128;
constexpr int kMaxQueries = 16;  // query heads per KV head taken by --queries

struct Setup {
  s4kv::kv::Int4KiviLayout layout;
  std::vector<std::byte> pool;
  std::vector<int> table;  // region r, block k -> pool block table[r * blocks + k]
  int blocks = 0;          // per region
};

// Random codes; scales and zeros of the magnitude a key or value channel has (fp16).
Setup make_setup(int block_size, int gv, int context, int regions, std::mt19937& rng) {
  Setup s{s4kv::kv::Int4KiviLayout::create(block_size, kD, gv).value(), {}, {}, 0};
  s.blocks = context / block_size;
  const int total = s.blocks * regions;
  s.pool.resize(static_cast<size_t>(total) * s.layout.block_bytes);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(0.05f, 0.5f), zero(-4.0f, 0.0f);
  for (int b = 0; b < total; ++b) {
    std::byte* p = s.pool.data() + static_cast<size_t>(b) * s.layout.block_bytes;
    for (size_t i = 0; i < s.layout.codes_bytes; ++i) {
      p[s.layout.k_codes_offset + i] = std::byte(byte(rng));
      p[s.layout.v_codes_offset + i] = std::byte(byte(rng));
    }
    auto put = [&](size_t offset, size_t n, auto& dist) {
      for (size_t i = 0; i < n; ++i) {
        const uint16_t h = s4kv::float_to_fp16(dist(rng));
        std::memcpy(p + offset + 2 * i, &h, 2);
      }
    };
    put(s.layout.k_scale_offset, s.layout.k_params_bytes / 2, scale);
    put(s.layout.k_zero_offset, s.layout.k_params_bytes / 2, zero);
    put(s.layout.v_scale_offset, s.layout.v_params_bytes / 2, scale);
    put(s.layout.v_zero_offset, s.layout.v_params_bytes / 2, zero);
  }
  s.table.resize(static_cast<size_t>(total));
  std::iota(s.table.begin(), s.table.end(), 0);
  std::shuffle(s.table.begin(), s.table.end(), rng);  // blocks anywhere in the pool
  return s;
}

// One region's scores (rows of `context` floats per query) and then its values' sums, as
// attention runs them block by block.
void run_region(CpuIsa isa, const Setup& s, const s4kv::backend::RopeTable& rope, int region,
                const std::vector<const float*>& qs, const std::vector<float*>& score_rows,
                const std::vector<const float*>& weight_rows, const std::vector<float*>& outs,
                bool values) {
  const int B = s.layout.block_size;
  const size_t nq = qs.size();
  float* rows[kMaxQueries];  // the block's part of each row, no allocation in the timed loop
  const float* w[kMaxQueries];
  for (int k = 0; k < s.blocks; ++k) {
    const std::byte* block =
        s.pool.data() + static_cast<size_t>(s.table[static_cast<size_t>(region * s.blocks + k)]) *
                            s.layout.block_bytes;
    const size_t offset = static_cast<size_t>(k) * B;
    if (!values) {
      for (size_t r = 0; r < nq; ++r) rows[r] = score_rows[r] + offset;
      s4kv::backend::cpu::int4_block_scores(isa, s.layout, block, &rope,
                                            static_cast<int64_t>(k) * B, qs, 0.0883883f,
                                            std::span<float* const>(rows, nq));
    } else {
      for (size_t r = 0; r < nq; ++r) w[r] = weight_rows[r] + offset;
      s4kv::backend::cpu::int4_block_values(isa, s.layout, block,
                                            std::span<const float* const>(w, nq), outs);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"int4_kivi attention kernels (scores, values) on one thread, every ISA"};
  std::vector<int> query_counts = {1, 2, 4, 7};
  int context = 2048, regions = 12, block_size = 64, gv = 32, repeats = 21;
  std::string json_out;
  app.add_option("--queries", query_counts, "query heads per KV head timed (GQA group)");
  app.add_option("--context", context, "positions per region (a multiple of the block size)");
  app.add_option("--regions", regions, "separate contexts (layers x KV heads)");
  app.add_option("--block-size", block_size, "int4_kivi block size")
      ->check(CLI::IsMember({32, 64, 128}));
  app.add_option("--value-group-size", gv, "Gv")->check(CLI::IsMember({32, 64, 128}));
  app.add_option("--repeats", repeats, "timed passes per figure (median)");
  app.add_option("--json", json_out, "write the figures as JSON here");
  CLI11_PARSE(app, argc, argv);
  for (const int nq : query_counts) {
    if (nq < 1 || nq > kMaxQueries) {
      std::fprintf(stderr, "--queries: each from 1 to %d, got %d\n", kMaxQueries, nq);
      return 2;
    }
  }
  if (context <= 0 || context % block_size != 0) {
    std::fprintf(stderr, "--context must be a positive multiple of --block-size (%d), got %d\n",
                 block_size, context);
    return 2;
  }
  if (regions <= 0 || repeats <= 0) {
    std::fprintf(stderr, "--regions and --repeats must be positive, got %d and %d\n", regions,
                 repeats);
    return 2;
  }
  std::mt19937 rng(7);
  const Setup s = make_setup(block_size, gv, context, regions, rng);
  s4kv::backend::RopeTable rope(
      s4kv::backend::cpu::rope_inv_freq(kD, 10000.0, s4kv::model::RopeScaling{}));
  rope.ensure(context);
  std::vector<CpuIsa> isas;
  for (CpuIsa isa : {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    if (s4kv::backend::cpu::cpu_supports(isa)) isas.push_back(isa);
  }
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::printf(
      "int4_kivi attention, head_dim %d, B %d, Gv %d, %d regions of %d positions, 1 thread;"
      " ns per position (median of %d)\n",
      kD, block_size, gv, regions, context, repeats);
  std::printf("%-7s %7s %10s %10s\n", "isa", "queries", "scores", "values");
  s4kv::Json rows = s4kv::Json::array();
  for (const int nq : query_counts) {
    std::vector<float> q(static_cast<size_t>(nq) * kD);
    for (float& x : q) x = dist(rng);
    std::vector<const float*> qs;
    for (int r = 0; r < nq; ++r) qs.push_back(q.data() + static_cast<size_t>(r) * kD);
    // Probabilities-like weights (they are the scores' rows in attention).
    std::vector<float> w(static_cast<size_t>(nq) * context);
    for (float& x : w) x = std::abs(dist(rng)) / static_cast<float>(context);
    std::vector<const float*> weight_rows;
    for (int r = 0; r < nq; ++r) weight_rows.push_back(w.data() + static_cast<size_t>(r) * context);
    std::vector<float> ref_scores, ref_out;
    for (const CpuIsa isa : isas) {
      std::vector<float> sc(static_cast<size_t>(nq) * context), o(static_cast<size_t>(nq) * kD);
      std::vector<float*> score_rows, outs;
      for (int r = 0; r < nq; ++r) {
        score_rows.push_back(sc.data() + static_cast<size_t>(r) * context);
        outs.push_back(o.data() + static_cast<size_t>(r) * kD);
      }
      run_region(isa, s, rope, 0, qs, score_rows, weight_rows, outs, false);
      run_region(isa, s, rope, 0, qs, score_rows, weight_rows, outs, true);
      if (isa == CpuIsa::kScalar) {
        ref_scores = sc, ref_out = o;
      } else if (!ref_scores.empty() && (std::memcmp(sc.data(), ref_scores.data(), sc.size() * 4) ||
                                         std::memcmp(o.data(), ref_out.data(), o.size() * 4))) {
        std::fprintf(stderr, "%s, %d queries: not the scalar reference's bits\n",
                     std::string(s4kv::backend::cpu::cpu_isa_name(isa)).c_str(), nq);
        return 1;
      }
      double ns[2];
      for (int part = 0; part < 2; ++part) {
        const bool values = part == 1;
        const int reps = isa == CpuIsa::kScalar ? std::min(repeats, 3) : repeats;
        std::vector<double> t;
        for (int rep = -1; rep < reps; ++rep) {  // rep -1: the warm-up
          const auto t0 = std::chrono::steady_clock::now();
          for (int region = 0; region < regions; ++region) {
            run_region(isa, s, rope, region, qs, score_rows, weight_rows, outs, values);
          }
          const double dt =
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
          if (rep >= 0) t.push_back(dt);
        }
        std::sort(t.begin(), t.end());
        ns[part] = t[t.size() / 2] * 1e9 / (static_cast<double>(regions) * context);
      }
      const std::string name(s4kv::backend::cpu::cpu_isa_name(isa));
      std::printf("%-7s %7d %10.2f %10.2f\n", name.c_str(), nq, ns[0], ns[1]);
      rows.push_back({{"isa", name},
                      {"queries", nq},
                      {"scores_ns_per_position", ns[0]},
                      {"values_ns_per_position", ns[1]}});
    }
  }
  if (!json_out.empty()) {
    s4kv::Json out = {{"benchmark", "cpu_int4_attention_bench"},
                      {"head_dim", kD},
                      {"block_size", block_size},
                      {"value_group_size", gv},
                      {"context", context},
                      {"regions", regions},
                      {"threads", 1},
                      {"repeats", repeats},
                      {"results", rows}};
    std::ofstream(json_out) << out.dump(1) << "\n";
  }
  return 0;
}
