// SipHash-2-4 against the reference vectors, and the block hash chain's properties.
#include "kv/block_hash.h"

#include <gtest/gtest.h>

#include <numeric>
#include <set>

namespace s4kv::kv {
namespace {

// Key bytes 00..0f read as two little-endian words, as in the SipHash paper (appendix A).
constexpr uint64_t kK0 = 0x0706050403020100ULL;
constexpr uint64_t kK1 = 0x0f0e0d0c0b0a0908ULL;

TEST(SipHash, PaperAppendixVector) {
  // Message 00..0e (15 bytes): the worked example of the paper, 0xa129ca6149be45e5.
  std::vector<uint8_t> msg(15);
  std::iota(msg.begin(), msg.end(), uint8_t{0});
  EXPECT_EQ(siphash24(kK0, kK1, msg), 0xa129ca6149be45e5ULL);
}

TEST(SipHash, ReferenceVectorsLength0To15) {
  // vectors.h of the reference implementation: message i = bytes 00..i-1, output as a
  // little-endian word. Covers the empty message, partial tails and the 8-byte boundary.
  const uint64_t expected[16] = {
      0x726fdb47dd0e0e31ULL, 0x74f839c593dc67fdULL, 0x0d6c8009d9a94f5aULL, 0x85676696d7fb7e2dULL,
      0xcf2794e0277187b7ULL, 0x18765564cd99a68dULL, 0xcbc9466e58fee3ceULL, 0xab0200f58b01d137ULL,
      0x93f5f5799a932462ULL, 0x9e0082df0ba9e4b0ULL, 0x7a5dbbc594ddb9f3ULL, 0xf4b32f46226bada7ULL,
      0x751e8fbc860ee5fbULL, 0x14ea5627c0843d90ULL, 0xf723ca908e7af2eeULL, 0xa129ca6149be45e5ULL,
  };
  std::vector<uint8_t> msg;
  for (int len = 0; len < 16; ++len) {
    EXPECT_EQ(siphash24(kK0, kK1, msg), expected[len]) << "length " << len;
    msg.push_back(static_cast<uint8_t>(len));
  }
}

TEST(BlockHash, SameInputsSameHash) {
  const std::vector<int32_t> tokens = {1, 2, 3, 4};
  EXPECT_EQ(hash_block(7, 99, tokens), hash_block(7, 99, tokens));
}

TEST(BlockHash, ParentChangesHash) {
  // The same tokens at a different position in a different prefix must not match.
  const std::vector<int32_t> tokens = {5, 6, 7, 8};
  EXPECT_NE(hash_block(7, 1, tokens), hash_block(7, 2, tokens));
}

TEST(BlockHash, TokensAndExtraKeysChangeHash) {
  const std::vector<int32_t> a = {1, 2, 3, 4};
  const std::vector<int32_t> b = {1, 2, 3, 5};
  EXPECT_NE(hash_block(7, 0, a), hash_block(7, 0, b));
  const std::vector<uint64_t> lora = {42};
  EXPECT_NE(hash_block(7, 0, a), hash_block(7, 0, a, lora));
  // Negative ids are hashed by their bit pattern, not truncated.
  const std::vector<int32_t> neg = {-1, 2, 3, 4};
  const std::vector<int32_t> big = {0x7fffffff, 2, 3, 4};
  EXPECT_NE(hash_block(7, 0, neg), hash_block(7, 0, big));
}

TEST(BlockHash, SaltChangesEveryHash) {
  std::vector<int32_t> tokens(64);
  std::iota(tokens.begin(), tokens.end(), 100);
  const std::vector<BlockHash> h1 = hash_request_blocks(tokens, 16, 1);
  const std::vector<BlockHash> h2 = hash_request_blocks(tokens, 16, 2);
  ASSERT_EQ(h1.size(), 4u);
  ASSERT_EQ(h2.size(), 4u);
  for (size_t i = 0; i < h1.size(); ++i) EXPECT_NE(h1[i], h2[i]) << i;
}

TEST(BlockHash, ProcessSaltIsStable) { EXPECT_EQ(process_hash_salt(), process_hash_salt()); }

TEST(BlockHash, ChainSkipsPartialBlockAndChainsFromSalt) {
  std::vector<int32_t> tokens(2 * 8 + 3);
  std::iota(tokens.begin(), tokens.end(), 0);
  const uint64_t salt = 0x1234;
  const std::vector<BlockHash> h = hash_request_blocks(tokens, 8, salt);
  ASSERT_EQ(h.size(), 2u);
  const std::span<const int32_t> all(tokens);
  EXPECT_EQ(h[0], hash_block(salt, salt, all.subspan(0, 8)));
  EXPECT_EQ(h[1], hash_block(salt, h[0], all.subspan(8, 8)));
}

TEST(BlockHash, PrefixHashesDoNotDependOnLaterTokens) {
  // Two prompts sharing the first two blocks share those hashes and differ after.
  std::vector<int32_t> a(32), b(32);
  std::iota(a.begin(), a.end(), 0);
  std::iota(b.begin(), b.end(), 0);
  b[20] = 999;
  const auto ha = hash_request_blocks(a, 8, 5);
  const auto hb = hash_request_blocks(b, 8, 5);
  EXPECT_EQ(ha[0], hb[0]);
  EXPECT_EQ(ha[1], hb[1]);
  EXPECT_NE(ha[2], hb[2]);
  EXPECT_NE(ha[3], hb[3]);  // chaining carries the difference forward
}

TEST(BlockHash, ExtendMatchesFullRecompute) {
  std::vector<int32_t> tokens(50);
  std::iota(tokens.begin(), tokens.end(), 3);
  std::vector<BlockHash> grown;
  for (size_t n = 0; n <= tokens.size(); ++n) {
    extend_block_hashes(grown, std::span<const int32_t>(tokens).first(n), 8, 11);
  }
  EXPECT_EQ(grown, hash_request_blocks(tokens, 8, 11));
}

TEST(BlockHash, NoCollisionsAmongManyBlocks) {
  std::set<BlockHash> seen;
  std::vector<int32_t> block(16, 0);
  for (int32_t i = 0; i < 20000; ++i) {
    block[static_cast<size_t>(i % 16)] = i;
    EXPECT_TRUE(seen.insert(hash_block(3, static_cast<BlockHash>(i), block)).second);
  }
}

}  // namespace
}  // namespace s4kv::kv
