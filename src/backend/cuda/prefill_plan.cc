// The host side of the prefill kernels (prefill_attention.cuh): the tiles of a step's prefill
// rows and their split over the context, the rows they cover, the fp16 RoPE rows of int4_kivi's
// pool tiles.
#include <algorithm>
#include <climits>
#include <cstdint>
#include <span>
#include <vector>

#include "backend/cuda/prefill_attention.cuh"
#include "common/check.h"
#include "common/half.h"

namespace s4kv::backend::cuda {
namespace {

// The context of a tile's last row: that row's position + 1.
int32_t tile_context(const ForwardBatch& b, const PrefillTile& t) {
  return b.seq_lens[t.seq] - (b.query_start_loc[t.seq + 1] - t.q_end);
}

}  // namespace

void plan_prefill(const ForwardBatch& b, int min_q_len, std::vector<PrefillTile>& tiles) {
  S4KV_CHECK(min_q_len >= 1, "plan_prefill: min_q_len ", min_q_len);
  tiles.clear();
  for (int64_t s = 0; s < b.num_seqs(); ++s) {
    const int32_t q0 = b.query_start_loc[s], q1 = b.query_start_loc[s + 1];
    if (q1 - q0 < min_q_len) continue;
    for (int32_t r = q0; r < q1; r += kPrefillTileRows) {
      tiles.push_back({static_cast<int32_t>(s), r, std::min(q1, r + kPrefillTileRows)});
    }
  }
  // The context of a tile's last row decides its work: the heaviest blocks start first, so the
  // grid's tail is made of light ones.
  std::sort(tiles.begin(), tiles.end(), [&](const PrefillTile& x, const PrefillTile& y) {
    const int32_t cx = tile_context(b, x), cy = tile_context(b, y);
    return cx != cy ? cx > cy : x.q_begin < y.q_begin;
  });
}

void split_prefill(const ForwardBatch& b, int num_heads, int64_t wave_blocks,
                   std::vector<PrefillTile>& tiles, std::vector<PrefillMerge>& merges) {
  merges.clear();
  const auto n = static_cast<int64_t>(tiles.size());
  const int64_t blocks = n * num_heads;
  if (n == 0 || num_heads <= 0 || 2 * blocks > wave_blocks) return;
  const int64_t per_tile = wave_blocks / blocks;  // parts a tile may take for about one wave
  // Each tile's parts and first slot, in the plan's order (the heaviest tiles take the slots
  // first) ...
  int32_t used = 0;
  for (PrefillTile& t : tiles) {
    // KV tiles of the tile's context, in tiles of 64 (the kernel's runs may count one or two
    // more where the sink block or the pool's end starts a tile: the parts then take a little
    // more each).
    const int64_t kv_tiles = (int64_t{tile_context(b, t)} + 63) / 64;
    const auto parts = static_cast<int32_t>(
        std::min({per_tile, kv_tiles / kPrefillMinRunTiles, int64_t{kPrefillSplitSlots - used}}));
    if (parts < 2) continue;
    t.parts = parts;
    t.slot = used;
    merges.push_back({t.q_begin, t.q_end, used, parts});
    used += parts;
  }
  if (merges.empty()) return;
  // ... then the split tiles' parts written out in place from the back (an entry is read before
  // any part is written over it), so nothing is allocated once `tiles` has the capacity.
  auto to = static_cast<size_t>(n + used - static_cast<int64_t>(merges.size()));
  tiles.resize(to);
  for (auto from = static_cast<size_t>(n); from-- > 0;) {
    const PrefillTile t = tiles[from];
    for (int32_t j = t.parts - 1; j >= 0; --j) {
      PrefillTile& p = tiles[--to];
      p = t;
      p.part = j;
      p.slot = t.slot + j;  // (an unsplit tile: one part, j = 0)
    }
  }
}

bool prefill_covers(const ForwardBatch& b, int min_q_len, int32_t row) {
  const auto& qsl = b.query_start_loc;
  S4KV_CHECK(!qsl.empty() && row >= 0 && row < qsl.back(), "prefill_covers: row ", row);
  // The sequence of the row: the last one starting at or before it (q_len >= 1 each).
  const auto s = std::upper_bound(qsl.begin(), qsl.end(), row) - qsl.begin() - 1;
  return qsl[static_cast<size_t>(s) + 1] - qsl[static_cast<size_t>(s)] >= min_q_len;
}

void remove_prefill_rows(const ForwardBatch& b, int min_q_len, std::vector<int32_t>& rows) {
  std::erase_if(rows, [&](int32_t row) { return prefill_covers(b, min_q_len, row); });
}

std::vector<uint16_t> int4_prefill_rope_image(std::span<const float> cos,
                                              std::span<const float> sin) {
  constexpr size_t kHalf = 64;  // a row: 64 cos, then 64 sin (head_dim 128)
  S4KV_CHECK(cos.size() == sin.size() && cos.size() % kHalf == 0,
             "int4_kivi prefill RoPE rows: tables of ", cos.size(), " and ", sin.size(),
             " entries");
  std::vector<uint16_t> out(2 * cos.size());
  for (size_t at = 0; at < cos.size(); ++at) {
    const size_t row = at / kHalf, i = at % kHalf;
    out[2 * kHalf * row + i] = float_to_fp16(cos[at]);
    out[2 * kHalf * row + kHalf + i] = float_to_fp16(sin[at]);
  }
  return out;
}

void plan_int4_pool_rows(const ForwardBatch& b, std::span<const PrefillTile> tiles,
                         std::span<const int32_t> pool_ends, int64_t num_pool_blocks,
                         int block_size, int64_t capacity_rows, Int4PoolRows& out) {
  S4KV_CHECK(static_cast<int64_t>(pool_ends.size()) == b.num_seqs() && block_size > 0 &&
                 capacity_rows >= 0 && capacity_rows <= INT32_MAX,
             "plan_int4_pool_rows: ", pool_ends.size(), " pool ends, ", b.num_seqs(),
             " sequences, block size ", block_size);
  out.clear();
  out.base.resize(pool_ends.size(), -1);
  out.tiles.resize(pool_ends.size(), 0);
  for (const PrefillTile& t : tiles) {
    const auto s = static_cast<size_t>(t.seq);
    S4KV_CHECK(s < pool_ends.size(), "plan_int4_pool_rows: tile of sequence ", t.seq);
    if (out.base[s] != -1) continue;
    const int32_t pool_end = pool_ends[s];
    const int32_t first_block = b.block_tables[s * static_cast<size_t>(b.max_num_blocks_per_seq)];
    const int64_t pa = pool_end > 0 && first_block >= num_pool_blocks ? block_size : 0;
    const int64_t pb = int64_t{pool_end} * block_size;
    // All of its pool, or the whole tiles of 64 positions that the room left holds.
    const int64_t room = capacity_rows - out.rows;
    const int64_t n = pb - pa <= room ? pb - pa : room / 64 * 64;
    if (n <= 0) continue;
    out.base[s] = static_cast<int32_t>(out.rows);
    out.tiles[s] = static_cast<int32_t>((n + 63) / 64);
    out.seqs.push_back(t.seq);
    out.max_tiles = std::max(out.max_tiles, out.tiles[s]);
    out.rows += n;
  }
}

}  // namespace s4kv::backend::cuda
