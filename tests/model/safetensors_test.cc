// SafetensorsFile / SafetensorsCheckpoint: the reference writer's output reads back exactly,
// and every corrupt file or index is refused with a Status naming the file (and the tensor
// where there is one), never a crash.
#include "model/safetensors.h"

#include <gtest/gtest.h>

#include <cstring>

#include "common/half.h"
#include "safetensors_writer.h"

namespace s4kv::model {
namespace {

using testing::raw_safetensors;
using testing::safetensors_bytes;
using testing::TempDir;
using testing::TestTensor;

std::string bytes_of(size_t n, char fill = '\0') { return std::string(n, fill); }

// Expects an error whose message contains every one of `parts`.
template <typename T>
void expect_error(const Result<T>& r, std::initializer_list<std::string> parts) {
  ASSERT_FALSE(r.is_ok()) << "expected an error containing " << *parts.begin();
  for (const std::string& p : parts) {
    EXPECT_NE(r.status().message().find(p), std::string::npos)
        << "message: " << r.status().message() << "\nmissing: " << p;
  }
}

Result<SafetensorsFile> open_bytes(const TempDir& dir, const std::string& bytes) {
  return SafetensorsFile::open(dir.write("t.safetensors", bytes));
}

// A one-tensor header with the given entry text for tensor "w".
std::string one_entry(const std::string& entry) { return "{\"w\":" + entry + "}"; }

TEST(SafetensorsTest, ReadsReferenceWriterFile) {
  auto r = SafetensorsFile::open("tests/model/data/reference.safetensors");
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  const SafetensorsFile& f = *r;
  EXPECT_EQ(f.tensor_names().size(), 13u);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  EXPECT_EQ(f.metadata().at("writer").rfind("safetensors ", 0), 0u);

  const TensorView* emb = f.find("model.embed_tokens.weight");
  ASSERT_NE(emb, nullptr);
  EXPECT_EQ(emb->dtype, DType::kBF16);
  EXPECT_EQ(emb->shape, (std::vector<int64_t>{4, 8}));
  ASSERT_EQ(emb->data.size(), 64u);
  for (int i = 0; i < 32; ++i) {
    uint16_t h;
    std::memcpy(&h, emb->data.data() + 2 * i, 2);
    EXPECT_EQ(bf16_to_float(h), i * 0.25f - 4.0f) << i;
  }
  const TensorView* vec = f.find("f16.vector");
  ASSERT_NE(vec, nullptr);
  for (int i = 0; i < 5; ++i) {
    uint16_t h;
    std::memcpy(&h, vec->data.data() + 2 * i, 2);
    EXPECT_EQ(fp16_to_float(h), i * 0.5f - 1.0f) << i;
  }
  const TensorView* scalar = f.find("f32.scalar");
  ASSERT_NE(scalar, nullptr);
  EXPECT_TRUE(scalar->shape.empty());
  EXPECT_EQ(scalar->numel(), 1);
  float s;
  std::memcpy(&s, scalar->data.data(), 4);
  EXPECT_EQ(s, 3.25f);
  const TensorView* ids = f.find("i64.ids");
  ASSERT_NE(ids, nullptr);
  int64_t id3;
  std::memcpy(&id3, ids->data.data() + 24, 8);
  EXPECT_EQ(id3, -(int64_t{1} << 62));
  const TensorView* empty = f.find("f64.empty");
  ASSERT_NE(empty, nullptr);
  EXPECT_EQ(empty->numel(), 0);
  EXPECT_TRUE(empty->data.empty());
  EXPECT_EQ(f.find("u8.cube")->shape, (std::vector<int64_t>{2, 2, 2}));
  EXPECT_EQ(f.find("bool.mask")->dtype, DType::kBool);
  EXPECT_EQ(f.find("f8_e4m3.x")->dtype, DType::kF8E4M3);
  EXPECT_EQ(f.find("f8_e5m2.x")->dtype, DType::kF8E5M2);
  EXPECT_EQ(f.find("no.such.tensor"), nullptr);
}

TEST(SafetensorsTest, RoundTripsOwnWriter) {
  TempDir dir;
  auto r = open_bytes(dir, safetensors_bytes({{"a", "F32", {2}, bytes_of(8, 'a')},
                                              {"b", "BF16", {1, 3}, bytes_of(6, 'b')}},
                                             {{"k", "v"}}));
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r->tensor_names(), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(r->metadata().at("k"), "v");
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(r->find("b")->data.data()), 6), "bbbbbb");
  EXPECT_NE(r->mapping(), nullptr);
}

TEST(SafetensorsTest, ParsesFromMemory) {
  const std::string bytes = safetensors_bytes({{"x", "I8", {3}, "abc"}});
  auto r = SafetensorsFile::parse(std::as_bytes(std::span(bytes)), "mem");
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r->name(), "mem");
  EXPECT_EQ(r->find("x")->data.data(),
            reinterpret_cast<const std::byte*>(bytes.data()) + bytes.size() - 3);
}

TEST(SafetensorsCorruptTest, EmptyFile) {
  TempDir dir;
  expect_error(open_bytes(dir, ""), {"t.safetensors", "0 bytes", "8-byte header length"});
}

TEST(SafetensorsCorruptTest, ShorterThanLength) {
  TempDir dir;
  expect_error(open_bytes(dir, std::string("\x05\x00\x00", 3)), {"t.safetensors", "3 bytes"});
}

TEST(SafetensorsCorruptTest, HeaderLengthBeyondFile) {
  TempDir dir;
  expect_error(open_bytes(dir, raw_safetensors(200, "{}")),
               {"t.safetensors", "header length 200 exceeds the 2 bytes"});
}

TEST(SafetensorsCorruptTest, HugeHeaderLength) {
  TempDir dir;
  expect_error(open_bytes(dir, raw_safetensors(uint64_t{1} << 63, "{}")),
               {"t.safetensors", "header length 9223372036854775808 exceeds the limit"});
  expect_error(open_bytes(dir, raw_safetensors(~uint64_t{0}, "{}")), {"exceeds the limit"});
}

TEST(SafetensorsCorruptTest, HeaderNotJson) {
  TempDir dir;
  expect_error(open_bytes(dir, raw_safetensors("{\"w\": {\"dtype\": ")),
               {"t.safetensors: header is not valid JSON"});
  expect_error(open_bytes(dir, raw_safetensors("\xff\xfe garbage")), {"not valid JSON"});
}

TEST(SafetensorsCorruptTest, HeaderJsonArray) {
  TempDir dir;
  expect_error(open_bytes(dir, raw_safetensors("[1, 2]")),
               {"t.safetensors: header is a JSON array, expected an object"});
  expect_error(open_bytes(dir, raw_safetensors("\"x\"")), {"JSON string"});
}

TEST(SafetensorsCorruptTest, DeepNesting) {
  TempDir dir;
  expect_error(
      open_bytes(dir, raw_safetensors(one_entry(std::string(50, '[') + std::string(50, ']')))),
      {"t.safetensors", "nesting deeper"});
}

TEST(SafetensorsCorruptTest, DuplicateTensorNames) {
  TempDir dir;
  const std::string e = "{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}";
  expect_error(open_bytes(dir, raw_safetensors("{\"w\":" + e + ",\"w\":" + e + "}", "x")),
               {"t.safetensors", "duplicate key \"w\""});
}

TEST(SafetensorsCorruptTest, EntryNotObject) {
  TempDir dir;
  expect_error(open_bytes(dir, raw_safetensors(one_entry("[1]"))),
               {"t.safetensors: tensor \"w\": expected an object"});
}

TEST(SafetensorsCorruptTest, MissingFields) {
  TempDir dir;
  expect_error(
      open_bytes(dir, raw_safetensors(one_entry("{\"shape\":[1],\"data_offsets\":[0,1]}"), "x")),
      {"tensor \"w\": missing \"dtype\""});
  expect_error(
      open_bytes(dir, raw_safetensors(one_entry("{\"dtype\":\"U8\",\"data_offsets\":[0,1]}"), "x")),
      {"tensor \"w\": missing \"shape\""});
  expect_error(open_bytes(dir, raw_safetensors(one_entry("{\"dtype\":\"U8\",\"shape\":[1]}"), "x")),
               {"tensor \"w\": missing \"data_offsets\""});
}

TEST(SafetensorsCorruptTest, UnknownDtype) {
  TempDir dir;
  expect_error(
      open_bytes(
          dir, raw_safetensors(one_entry("{\"dtype\":\"F7\",\"shape\":[1],\"data_offsets\":[0,1]}"),
                               "x")),
      {"t.safetensors: tensor \"w\": unknown dtype \"F7\""});
  expect_error(
      open_bytes(dir, raw_safetensors(
                          one_entry("{\"dtype\":3,\"shape\":[1],\"data_offsets\":[0,1]}"), "x")),
      {"tensor \"w\": dtype must be a string"});
}

TEST(SafetensorsCorruptTest, BadShapeEntries) {
  TempDir dir;
  for (const char* shape :
       {"[-1]", "[2.5]", "[\"4\"]", "4", "[null]", "[1e3]", "[18446744073709551616]"}) {
    const std::string h =
        one_entry(std::string("{\"dtype\":\"U8\",\"shape\":") + shape + ",\"data_offsets\":[0,1]}");
    expect_error(open_bytes(dir, raw_safetensors(h, "x")),
                 {"t.safetensors: tensor \"w\": shape must be an array of non-negative integers"});
  }
}

TEST(SafetensorsCorruptTest, ShapeProductOverflow) {
  TempDir dir;
  const std::string h =
      one_entry("{\"dtype\":\"U8\",\"shape\":[4294967296,4294967296,0],\"data_offsets\":[0,0]}");
  expect_error(open_bytes(dir, raw_safetensors(h)), {"tensor \"w\"", "more elements than fit"});
  const std::string big =
      one_entry("{\"dtype\":\"F64\",\"shape\":[9223372036854775807],\"data_offsets\":[0,8]}");
  expect_error(open_bytes(dir, raw_safetensors(big, "12345678")),
               {"tensor \"w\"", "more than 2^64"});
}

TEST(SafetensorsCorruptTest, ByteLengthMismatch) {
  TempDir dir;
  const std::string h =
      "{\"model.norm.weight\":{\"dtype\":\"BF16\",\"shape\":[64],\"data_offsets\":[0,100]}}";
  expect_error(open_bytes(dir, raw_safetensors(h, bytes_of(100))),
               {"t.safetensors: tensor \"model.norm.weight\": data_offsets [0, 100] hold 100 "
                "bytes but shape [64] of BF16 needs 128"});
}

TEST(SafetensorsCorruptTest, OverlappingOffsets) {
  TempDir dir;
  const std::string h =
      "{\"a\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0,8]},"
      "\"b\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[4,12]}}";
  expect_error(open_bytes(dir, raw_safetensors(h, bytes_of(12))),
               {"t.safetensors: tensor \"b\"", "overlap tensor \"a\""});
  const std::string inside =
      "{\"a\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0,8]},"
      "\"z\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[4,4]}}";
  expect_error(open_bytes(dir, raw_safetensors(inside, bytes_of(8))), {"tensor \"z\"", "overlap"});
}

TEST(SafetensorsCorruptTest, AdjacentAndEmptyTensorsAreFine) {
  TempDir dir;
  const std::string h =
      "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
      "\"e\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[4,4]},"
      "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[4,8]}}";
  auto r = open_bytes(dir, raw_safetensors(h, bytes_of(8)));
  EXPECT_TRUE(r.is_ok()) << r.status().message();
}

TEST(SafetensorsCorruptTest, OutOfBoundsOffsets) {
  TempDir dir;
  const std::string h = one_entry("{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[1000,1008]}");
  expect_error(open_bytes(dir, raw_safetensors(h, bytes_of(8))),
               {"t.safetensors: tensor \"w\": data_offsets [1000,1008]: end is beyond the data "
                "section of 8 bytes"});
  const std::string huge = one_entry(
      "{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[18446744073709551615,18446744073709551615]"
      "}");
  expect_error(open_bytes(dir, raw_safetensors(huge, bytes_of(8))), {"tensor \"w\"", "beyond"});
}

TEST(SafetensorsCorruptTest, DataSectionTruncated) {
  TempDir dir;
  const std::string good = safetensors_bytes({{"w", "F32", {4}, bytes_of(16)}});
  expect_error(open_bytes(dir, good.substr(0, good.size() - 1)),
               {"t.safetensors: tensor \"w\"", "beyond the data section of 15 bytes"});
}

TEST(SafetensorsCorruptTest, BadOffsets) {
  TempDir dir;
  for (const char* off : {"[0]", "[0,1,2]", "[-1,0]", "[0.0,1]", "\"0-1\""}) {
    const std::string h =
        one_entry(std::string("{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":") + off + "}");
    expect_error(open_bytes(dir, raw_safetensors(h, "x")),
                 {"tensor \"w\": data_offsets must be [begin, end] non-negative integers"});
  }
}

TEST(SafetensorsCorruptTest, BeginAfterEnd) {
  TempDir dir;
  const std::string h = one_entry("{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[5,4]}");
  expect_error(open_bytes(dir, raw_safetensors(h, bytes_of(8))),
               {"t.safetensors: tensor \"w\": data_offsets [5,4]: begin is after end"});
}

TEST(SafetensorsCorruptTest, MetadataNotStrings) {
  TempDir dir;
  expect_error(open_bytes(dir, raw_safetensors("{\"__metadata__\":{\"total_size\":12}}")),
               {"t.safetensors: \"__metadata__\" must be an object of strings",
                "key \"total_size\" holds integer 12"});
  expect_error(open_bytes(dir, raw_safetensors("{\"__metadata__\":[\"a\"]}")),
               {"\"__metadata__\" must be an object"});
}

TEST(SafetensorsCorruptTest, ControlCharactersInNamesAreEscaped) {
  TempDir dir;
  const std::string h = "{\"a\\u0007\\n\":{\"dtype\":\"F7\",\"shape\":[1],\"data_offsets\":[0,1]}}";
  expect_error(open_bytes(dir, raw_safetensors(h, "x")), {"tensor \"a\\u0007\\n\""});
}

// --- sharded checkpoints --------------------------------------------------------------------

class ShardedTest : public ::testing::Test {
 protected:
  // Two shards: a.safetensors holds x and y, b.safetensors holds z.
  void SetUp() override {
    dir_.write("a.safetensors",
               safetensors_bytes({{"x", "F32", {1}, bytes_of(4)}, {"y", "F32", {2}, bytes_of(8)}}));
    dir_.write("b.safetensors", safetensors_bytes({{"z", "BF16", {3}, bytes_of(6)}}));
  }
  Result<SafetensorsCheckpoint> open_with(const std::string& weight_map) {
    const std::string index =
        "{\"metadata\":{\"total_size\":18},\"weight_map\":" + weight_map + "}";
    return SafetensorsCheckpoint::open_index(dir_.write("model.safetensors.index.json", index));
  }
  TempDir dir_;
};

TEST_F(ShardedTest, Loads) {
  auto r = open_with(R"({"x":"a.safetensors","y":"a.safetensors","z":"b.safetensors"})");
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r->files().size(), 2u);
  EXPECT_EQ(r->tensors().size(), 3u);
  EXPECT_EQ(r->find("z")->shape, (std::vector<int64_t>{3}));
  EXPECT_EQ(r->file_of("z"), dir_.file("b.safetensors"));
  EXPECT_EQ(r->find("nope"), nullptr);
}

TEST_F(ShardedTest, MissingShardFile) {
  auto r = open_with(R"({"x":"a.safetensors","y":"a.safetensors","z":"c.safetensors"})");
  expect_error(r, {"model.safetensors.index.json: tensor \"z\" is in shard \"c.safetensors\"",
                   "no such file"});
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
}

TEST_F(ShardedTest, PathTraversal) {
  for (const char* name : {"../a.safetensors", "/etc/passwd", "sub/a.safetensors", "..", ".", ""}) {
    auto r = open_with(std::string(R"({"x":")") + name +
                       R"(","y":"a.safetensors","z":"b.safetensors"})");
    expect_error(r, {"model.safetensors.index.json: tensor \"x\"", "must be a plain file name"});
  }
  expect_error(open_with(R"({"x":3})"), {"tensor \"x\": shard 3 must be a plain file name"});
}

TEST_F(ShardedTest, TensorInWrongShard) {
  auto r = open_with(R"({"x":"a.safetensors","y":"a.safetensors","z":"a.safetensors"})");
  // b.safetensors is never opened, so z is simply not where the index says.
  expect_error(r, {"tensor \"z\" is listed in shard \"a.safetensors\"", "does not hold it"});
  auto r2 = open_with(R"({"x":"b.safetensors","y":"a.safetensors","z":"b.safetensors"})");
  expect_error(r2,
               {"tensor \"x\" is listed in shard \"b.safetensors\"", "(it is in", "a.safetensors"});
}

TEST_F(ShardedTest, TensorNotInWeightMap) {
  auto r = open_with(R"({"x":"a.safetensors","z":"b.safetensors"})");
  expect_error(r, {"tensor \"y\" is in", "a.safetensors but not in weight_map"});
}

TEST_F(ShardedTest, TensorInTwoShards) {
  dir_.write("b.safetensors",
             safetensors_bytes({{"z", "BF16", {3}, bytes_of(6)}, {"x", "F32", {1}, bytes_of(4)}}));
  auto r = open_with(R"({"x":"a.safetensors","y":"a.safetensors","z":"b.safetensors"})");
  expect_error(r, {"tensor \"x\" is in two shards", "a.safetensors", "b.safetensors"});
}

TEST_F(ShardedTest, CorruptShardNamesShardAndTensor) {
  dir_.write(
      "b.safetensors",
      raw_safetensors(one_entry("{\"dtype\":\"F7\",\"shape\":[1],\"data_offsets\":[0,1]}"), "x"));
  auto r = open_with(R"({"x":"a.safetensors","y":"a.safetensors","z":"b.safetensors"})");
  expect_error(r, {"b.safetensors: tensor \"w\": unknown dtype"});
}

TEST_F(ShardedTest, BadIndexDocuments) {
  expect_error(SafetensorsCheckpoint::open_index(dir_.write("i.json", "[]")),
               {"i.json: expected a JSON object"});
  expect_error(SafetensorsCheckpoint::open_index(dir_.write("i.json", "{\"weight_map\": []}")),
               {"i.json: \"weight_map\" must be an object"});
  expect_error(SafetensorsCheckpoint::open_index(
                   dir_.write("i.json", "{\"metadata\": 1, \"weight_map\": {}}")),
               {"i.json: \"metadata\" must be an object"});
  expect_error(SafetensorsCheckpoint::open_index(dir_.write("i.json", "{\"weight_map\": {")),
               {"i.json", "not valid JSON"});
}

}  // namespace
}  // namespace s4kv::model
