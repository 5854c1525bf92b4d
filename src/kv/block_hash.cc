// SipHash-2-4 and the block hash chain built on it (see block_hash.h).
#include "kv/block_hash.h"

#include <bit>
#include <random>

#include "common/check.h"

namespace s4kv::kv {
namespace {

// SipHash state that absorbs bytes as they come, so a block hash is computed without first
// copying the block into one buffer.
class SipHasher {
 public:
  SipHasher(uint64_t k0, uint64_t k1)
      : v0_(k0 ^ 0x736f6d6570736575ULL),
        v1_(k1 ^ 0x646f72616e646f6dULL),
        v2_(k0 ^ 0x6c7967656e657261ULL),
        v3_(k1 ^ 0x7465646279746573ULL) {}

  void update(std::span<const uint8_t> data) {
    for (uint8_t byte : data) {
      tail_ |= uint64_t{byte} << (8 * (length_ % 8));
      ++length_;
      if (length_ % 8 == 0) {
        compress(tail_);
        tail_ = 0;
      }
    }
  }
  void update_u32(uint32_t x) { update_le(x, 4); }
  void update_u64(uint64_t x) { update_le(x, 8); }

  uint64_t finish() {
    // The last word carries the message length mod 256 in its top byte (the paper's padding).
    compress(tail_ | (length_ << 56));
    v2_ ^= 0xff;
    for (int i = 0; i < 4; ++i) round();
    return v0_ ^ v1_ ^ v2_ ^ v3_;
  }

 private:
  void update_le(uint64_t x, int num_bytes) {
    uint8_t bytes[8];
    for (int i = 0; i < num_bytes; ++i) bytes[i] = static_cast<uint8_t>(x >> (8 * i));
    update({bytes, static_cast<size_t>(num_bytes)});
  }
  void compress(uint64_t m) {
    v3_ ^= m;
    round();
    round();
    v0_ ^= m;
  }
  void round() {
    v0_ += v1_;
    v1_ = std::rotl(v1_, 13);
    v1_ ^= v0_;
    v0_ = std::rotl(v0_, 32);
    v2_ += v3_;
    v3_ = std::rotl(v3_, 16);
    v3_ ^= v2_;
    v0_ += v3_;
    v3_ = std::rotl(v3_, 21);
    v3_ ^= v0_;
    v2_ += v1_;
    v1_ = std::rotl(v1_, 17);
    v1_ ^= v2_;
    v2_ = std::rotl(v2_, 32);
  }

  uint64_t v0_, v1_, v2_, v3_;
  uint64_t tail_ = 0;    // bytes received since the last full 8-byte word, little-endian
  uint64_t length_ = 0;  // total bytes received
};

// Second key half: the salt alone keys the hash; a fixed, distinct k1 keeps k0 != k1.
constexpr uint64_t kKeyTweak = 0x9e3779b97f4a7c15ULL;

}  // namespace

uint64_t siphash24(uint64_t k0, uint64_t k1, std::span<const uint8_t> data) {
  SipHasher hasher(k0, k1);
  hasher.update(data);
  return hasher.finish();
}

uint64_t process_hash_salt() {
  static const uint64_t salt = [] {
    std::random_device device;
    return (uint64_t{device()} << 32) ^ uint64_t { device() };
  }();
  return salt;
}

BlockHash hash_block(uint64_t salt, BlockHash parent, std::span<const int32_t> token_ids,
                     std::span<const uint64_t> extra_keys) {
  SipHasher hasher(salt, salt ^ kKeyTweak);
  hasher.update_u64(parent);
  // Length prefixes keep the token/extra-key boundary unambiguous.
  hasher.update_u32(static_cast<uint32_t>(token_ids.size()));
  for (int32_t token : token_ids) hasher.update_u32(static_cast<uint32_t>(token));
  hasher.update_u32(static_cast<uint32_t>(extra_keys.size()));
  for (uint64_t key : extra_keys) hasher.update_u64(key);
  return hasher.finish();
}

void extend_block_hashes(std::vector<BlockHash>& hashes, std::span<const int32_t> token_ids,
                         int block_size, uint64_t salt) {
  S4KV_CHECK(block_size > 0, "block_size=", block_size);
  const size_t num_full = token_ids.size() / static_cast<size_t>(block_size);
  S4KV_CHECK(hashes.size() <= num_full, "hashes cover ", hashes.size(), " blocks, tokens only ",
             num_full);
  for (size_t i = hashes.size(); i < num_full; ++i) {
    const BlockHash parent = i == 0 ? salt : hashes[i - 1];
    hashes.push_back(hash_block(salt, parent, token_ids.subspan(i * block_size, block_size)));
  }
}

std::vector<BlockHash> hash_request_blocks(std::span<const int32_t> token_ids, int block_size,
                                           uint64_t salt) {
  std::vector<BlockHash> hashes;
  extend_block_hashes(hashes, token_ids, block_size, salt);
  return hashes;
}

}  // namespace s4kv::kv
