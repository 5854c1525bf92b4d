// gemm16_bench: the CPU backend's products with 16-bit weights on one thread, for s4kv-tiny's
// linear layers (k x n: qkv 512 x 1024, o_proj 512 x 512, gate_up 512 x 2048, down 1024 x 512)
// at several token counts, three ways: gemm16's direct kernels (gemm16.h), gemm16_packed's
// blocked kernels (gemm16_packed.h), and the weight widened to fp32 then OpenBLAS sgemm (the
// prompt path before gemm16_packed). Correctness first: each way's output must be within the
// summation-order tolerance of the others on the same inputs. Then a warm-up and --repeats
// timed calls each; prints the median's GFLOP/s (2 * tokens * k * n per call).
// S4KV_CPU_ISA lowers the kernels' instruction set (gemm16.h).
//
//   build/bench/gemm16_bench [--tokens 17 32 64 128 512] [--repeats 21] [--dtype bf16|fp16]
//       [--json OUT]
#include <cblas.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/gemm16.h"
#include "backend/cpu/gemm16_packed.h"
#include "common/half.h"
#include "common/json.h"

namespace {

using s4kv::backend::cpu::CpuIsa;

struct Shape {
  const char* name;
  int64_t k, n;
};

// out = x @ w^T, one of the three ways.
void run(int way, CpuIsa isa, const std::vector<float>& x, int64_t m, int64_t k,
         const std::vector<uint16_t>& w, bool bf16, int64_t n, std::vector<float>& out,
         std::vector<float>& widened) {
  switch (way) {
    case 0:
      s4kv::backend::cpu::gemm16(isa, x.data(), k, m, k, w.data(), bf16, n, out.data(), n, false);
      return;
    case 1:
      s4kv::backend::cpu::gemm16_packed(isa, x.data(), k, m, k, w.data(), bf16, n, out.data(), n,
                                        false);
      return;
    default:
      s4kv::backend::cpu::widen16(isa, w.data(), bf16, n * k, widened.data());
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(m), static_cast<int>(n),
                  static_cast<int>(k), 1.0f, x.data(), static_cast<int>(k), widened.data(),
                  static_cast<int>(k), 0.0f, out.data(), static_cast<int>(n));
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"16-bit-weight GEMMs on one thread: direct, packed, widened + OpenBLAS"};
  std::vector<int64_t> token_counts = {17, 32, 64, 128, 512};
  int repeats = 21;
  std::string dtype = "bf16", json_out;
  app.add_option("--json", json_out, "write the figures as JSON here");
  app.add_option("--tokens", token_counts, "token counts timed");
  app.add_option("--repeats", repeats, "timed calls per figure (median)");
  app.add_option("--dtype", dtype, "weight dtype")->check(CLI::IsMember({"bf16", "fp16"}));
  CLI11_PARSE(app, argc, argv);
  openblas_set_num_threads(1);
  const bool bf16 = dtype == "bf16";
  const CpuIsa isa = s4kv::backend::cpu::cpu_isa();
  const char* ways[] = {"direct", "packed", "sgemm"};
  const Shape shapes[] = {
      {"qkv", 512, 1024}, {"o_proj", 512, 512}, {"gate_up", 512, 2048}, {"down", 1024, 512}};
  std::mt19937 rng(1);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::printf("kernels %s, weights %s, 1 thread; GFLOP/s (median of %d)\n",
              std::string(s4kv::backend::cpu::cpu_isa_name(isa)).c_str(), dtype.c_str(), repeats);
  std::printf("%-8s %6s %10s %10s %10s\n", "layer", "tokens", ways[0], ways[1], ways[2]);
  s4kv::Json rows = s4kv::Json::array();
  for (const Shape& s : shapes) {
    std::vector<uint16_t> w(static_cast<size_t>(s.n * s.k));
    for (auto& h : w) h = bf16 ? s4kv::float_to_bf16(dist(rng)) : s4kv::float_to_fp16(dist(rng));
    std::vector<float> widened(w.size());
    for (const int64_t m : token_counts) {
      std::vector<float> x(static_cast<size_t>(m * s.k));
      for (float& v : x) v = dist(rng);
      std::vector<float> outs[3];
      double gflops[3];
      for (int way = 0; way < 3; ++way) {
        outs[way].assign(static_cast<size_t>(m * s.n), 0.0f);
        run(way, isa, x, m, s.k, w, bf16, s.n, outs[way], widened);  // warm-up
        std::vector<double> t;
        for (int r = 0; r < repeats; ++r) {
          const auto t0 = std::chrono::steady_clock::now();
          run(way, isa, x, m, s.k, w, bf16, s.n, outs[way], widened);
          t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        }
        std::sort(t.begin(), t.end());
        gflops[way] = 2.0 * static_cast<double>(m * s.k * s.n) / t[t.size() / 2] * 1e-9;
      }
      // Same products, other summation orders: within k ulps of the sums' scale (normal inputs).
      for (size_t i = 0; i < outs[0].size(); ++i) {
        const double tol = 1e-7 * static_cast<double>(s.k) * 4.0 * std::sqrt(double(s.k));
        if (std::abs(outs[1][i] - outs[0][i]) > tol || std::abs(outs[2][i] - outs[0][i]) > tol) {
          std::fprintf(stderr, "%s, %lld tokens: outputs disagree at %zu: %g %g %g\n", s.name,
                       static_cast<long long>(m), i, outs[0][i], outs[1][i], outs[2][i]);
          return 1;
        }
      }
      std::printf("%-8s %6lld %10.1f %10.1f %10.1f\n", s.name, static_cast<long long>(m), gflops[0],
                  gflops[1], gflops[2]);
      rows.push_back({{"layer", s.name},
                      {"k", s.k},
                      {"n", s.n},
                      {"tokens", m},
                      {"gflops_direct", gflops[0]},
                      {"gflops_packed", gflops[1]},
                      {"gflops_sgemm", gflops[2]}});
    }
  }
  if (!json_out.empty()) {
    s4kv::Json out = {{"benchmark", "gemm16_bench"},
                      {"cpu_isa", std::string(s4kv::backend::cpu::cpu_isa_name(isa))},
                      {"dtype", dtype},
                      {"threads", 1},
                      {"repeats", repeats},
                      {"results", rows}};
    std::ofstream(json_out) << out.dump(1) << "\n";
  }
  return 0;
}
