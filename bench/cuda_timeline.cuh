// cuda_attention_bench --timeline: one decode attention launch recorded block by block
// (src/backend/cuda/decode_timeline.cuh; builds with -DS4KV_DECODE_TIMELINE only), launched from
// the host and replayed from a CUDA graph, summarized per kernel in microseconds from the
// launch's first block entry: when its blocks enter (first, last), how long the prologue takes
// (entry to loop start, median and most), the loop (median, most), when its blocks exit (first,
// median, last). Bench code: one copy per including file.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/decode_timeline.cuh"
#include "cuda_bench_util.cuh"

namespace s4kv::backend::cuda {
namespace {  // NOLINT(google-build-namespaces): one copy per bench source

#if defined(S4KV_DECODE_TIMELINE)
constexpr bool kTimelineBuilt = true;
#else
constexpr bool kTimelineBuilt = false;
#endif

// The launch's first block entry, which every record's times are taken from.
unsigned long long first_entry(const std::vector<TimelineRecord>& recs) {
  unsigned long long t0 = recs.empty() ? 0 : recs.front().t[kMarkEntry];
  for (const TimelineRecord& r : recs) t0 = std::min(t0, r.t[kMarkEntry]);
  return t0;
}

// The JSON object of one launch's records ({"int4": {...}, "rows": {...}, "merge": {...},
// "end_us": last exit}), and a line a kernel on stderr prefixed by `label`. Spans between marks
// (decode_timeline.cuh) as median and most: issued (entry to the first copies issued), prologue
// (entry to the loop), first (loop start to the first block landed), loop, epilogue (loop end to
// exit).
std::string summarize_timeline(const std::vector<TimelineRecord>& recs, const std::string& label) {
  if (recs.empty()) return "{}";
  const unsigned long long t0 = first_entry(recs);
  auto at = [&](unsigned long long t) { return static_cast<double>(t - t0) / 1e3; };
  auto quant = [](std::vector<double> v, double q) {
    if (v.empty()) return -1.0;
    std::sort(v.begin(), v.end());
    return v[static_cast<size_t>(q * static_cast<double>(v.size() - 1) + 0.5)];
  };
  struct Span {
    const char* name;
    int from, to;
  };
  const Span spans[] = {{"issued", kMarkEntry, kMarkIssued},
                        {"prologue", kMarkEntry, kMarkLoop},
                        {"first", kMarkLoop, kMarkFirst},
                        {"loop", kMarkLoop, kMarkLoopEnd},
                        {"epilogue", kMarkLoopEnd, kMarkExit}};
  std::string json = "{";
  double end = 0;
  const char* names[3] = {"int4", "rows", "merge"};
  for (int k = 0; k < 3; ++k) {
    std::vector<double> entry, exit, span[5];
    std::vector<int> per_sm(1024, 0);
    for (const TimelineRecord& r : recs) {
      if (r.kernel != k) continue;
      entry.push_back(at(r.t[kMarkEntry]));
      if (r.t[kMarkExit] != 0) {
        exit.push_back(at(r.t[kMarkExit]));
        end = std::max(end, at(r.t[kMarkExit]));
      }
      for (int j = 0; j < 5; ++j) {
        if (r.t[spans[j].from] != 0 && r.t[spans[j].to] != 0) {
          span[j].push_back(static_cast<double>(r.t[spans[j].to] - r.t[spans[j].from]) / 1e3);
        }
      }
      if (r.sm >= 0 && r.sm < 1024) ++per_sm[static_cast<size_t>(r.sm)];
    }
    if (entry.empty()) continue;
    const int most_on_sm = *std::max_element(per_sm.begin(), per_sm.end());
    char buf[256];
    std::snprintf(buf, sizeof(buf),
                  "%s\"%s\": {\"blocks\": %zu, \"most_on_one_sm\": %d, \"entry_first\": %.2f, "
                  "\"entry_last\": %.2f, \"exit_first\": %.2f, \"exit_median\": %.2f, "
                  "\"exit_last\": %.2f",
                  json.size() > 1 ? ", " : "", names[k], entry.size(), most_on_sm, quant(entry, 0),
                  quant(entry, 1), quant(exit, 0), quant(exit, 0.5), quant(exit, 1));
    json += buf;
    std::string line;
    for (int j = 0; j < 5; ++j) {
      if (span[j].empty()) continue;
      std::snprintf(buf, sizeof(buf), ", \"%s_median\": %.2f, \"%s_max\": %.2f", spans[j].name,
                    quant(span[j], 0.5), spans[j].name, quant(span[j], 1));
      json += buf;
      std::snprintf(buf, sizeof(buf), "  %s %.2f (%.2f)", spans[j].name, quant(span[j], 0.5),
                    quant(span[j], 1));
      line += buf;
    }
    json += "}";
    std::fprintf(stderr,
                 "  timeline %s %-5s %4zu blocks: enter %6.2f..%6.2f  exit %6.2f / %6.2f / %6.2f us"
                 "%s\n",
                 label.c_str(), names[k], entry.size(), quant(entry, 0), quant(entry, 1),
                 quant(exit, 0), quant(exit, 0.5), quant(exit, 1), line.c_str());
  }
  char tail[64];
  std::snprintf(tail, sizeof(tail), ", \"end_us\": %.2f}", end);
  return json + tail;
}

// The records as CSV (kernel, sm, blockIdx.x, blockIdx.y, each mark in us from the first entry;
// -1 where not reached), for a closer look at one launch.
void write_timeline_csv(const std::vector<TimelineRecord>& recs, const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) {
    std::fprintf(stderr, "cannot write %s\n", path.c_str());
    return;
  }
  const unsigned long long t0 = first_entry(recs);
  std::fprintf(f, "kernel,sm,x,y,entry,issued,loop,first,loop_end,exit\n");
  for (const TimelineRecord& r : recs) {
    std::fprintf(f, "%d,%d,%d,%d", r.kernel, r.sm, r.x, r.y);
    for (int j = 0; j < kMarks; ++j) {
      std::fprintf(f, ",%.3f", r.t[j] == 0 ? -1.0 : static_cast<double>(r.t[j] - t0) / 1e3);
    }
    std::fprintf(f, "\n");
  }
  std::fclose(f);
}

// The records of one launch(stream) after warm-up: from the host (graph false) or replayed from
// a graph captured once. Built without the timeline, an empty list.
template <typename F>
std::vector<TimelineRecord> record_timeline(F&& launch, bool graph) {
  std::vector<TimelineRecord> out;
#if defined(S4KV_DECODE_TIMELINE)
  constexpr unsigned kCapacity = 1u << 16;
  TimelineRecord* recs = nullptr;
  unsigned* next = nullptr;
  S4KV_CUDA_CHECK(cudaMalloc(&recs, sizeof(TimelineRecord) * kCapacity));
  S4KV_CUDA_CHECK(cudaMalloc(&next, sizeof(unsigned)));
  std::unique_ptr<CapturedGraph> captured;
  cudaStream_t own = nullptr;  // from the host: a stream of its own
  if (graph) {
    captured = std::make_unique<CapturedGraph>(launch);
  } else {
    S4KV_CUDA_CHECK(cudaStreamCreateWithFlags(&own, cudaStreamNonBlocking));
  }
  const cudaStream_t s = graph ? captured->stream() : own;
  auto once = [&] {
    if (graph) {
      captured->replay();
    } else {
      launch(s);
    }
  };
  attach_decode_timeline(Timeline{recs, next, kCapacity});
  for (int i = 0; i < 3; ++i) {  // the last one counts
    S4KV_CUDA_CHECK(cudaStreamSynchronize(s));
    S4KV_CUDA_CHECK(cudaMemsetAsync(recs, 0, sizeof(TimelineRecord) * kCapacity, s));
    S4KV_CUDA_CHECK(cudaMemsetAsync(next, 0, sizeof(unsigned), s));
    S4KV_CUDA_CHECK(cudaStreamSynchronize(s));
    once();
    S4KV_CUDA_CHECK(cudaStreamSynchronize(s));
  }
  attach_decode_timeline(Timeline{});
  unsigned n = 0;
  S4KV_CUDA_CHECK(cudaMemcpy(&n, next, sizeof(n), cudaMemcpyDeviceToHost));
  out.resize(std::min(n, kCapacity));
  S4KV_CUDA_CHECK(
      cudaMemcpy(out.data(), recs, sizeof(TimelineRecord) * out.size(), cudaMemcpyDeviceToHost));
  if (own != nullptr) S4KV_CUDA_CHECK(cudaStreamDestroy(own));
  S4KV_CUDA_CHECK(cudaFree(recs));
  S4KV_CUDA_CHECK(cudaFree(next));
#else
  (void)launch;
  (void)graph;
#endif
  return out;
}

}  // namespace
}  // namespace s4kv::backend::cuda
