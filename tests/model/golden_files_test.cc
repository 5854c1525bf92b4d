// The golden files of s4kv-tiny (tests/golden/s4kv-tiny, written by Hugging Face safetensors
// and transformers) read back through our own reader, and checked for internal consistency:
// shapes agree with golden.json and the model, every stored number is finite, and the first
// greedy token is the argmax of the last stored logit row. The engine's comparison against
// these files lives with the engine.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "common/json.h"
#include "model/model_config.h"
#include "model/safetensors.h"

namespace s4kv::model {
namespace {

constexpr const char* kDir = "tests/golden/s4kv-tiny";

TEST(GoldenFiles, ConsistentWithModelAndThemselves) {
  auto config = load_model_config("models/s4kv-tiny");
  ASSERT_TRUE(config.is_ok()) << config.status().message();
  auto meta = read_json_file(std::string(kDir) + "/golden.json");
  ASSERT_TRUE(meta.is_ok()) << meta.status().message();
  auto file = SafetensorsFile::open(std::string(kDir) + "/logits.safetensors");
  ASSERT_TRUE(file.is_ok()) << file.status().message();

  const auto& prompts = meta->at("prompts");
  ASSERT_GE(prompts.size(), 6u);
  const int64_t vocab = config->vocab_size;
  const size_t greedy_len = meta->at("greedy_len").get<size_t>();
  int64_t max_tokens = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    SCOPED_TRACE("prompt " + std::to_string(i));
    const std::string p = "p" + std::to_string(i) + ".";
    const TensorView* ids = file->find(p + "ids");
    const TensorView* positions = file->find(p + "positions");
    const TensorView* logits = file->find(p + "logits");
    const TensorView* greedy = file->find(p + "greedy");
    const TensorView* margin = file->find(p + "greedy_margin");
    ASSERT_TRUE(ids && positions && logits && greedy && margin);
    ASSERT_EQ(ids->dtype, DType::kI32);
    ASSERT_EQ(logits->dtype, DType::kF32);

    const auto id_values = ids->to_vector<int32_t>();
    EXPECT_EQ(static_cast<int64_t>(id_values.size()), prompts[i].at("num_tokens").get<int64_t>());
    EXPECT_TRUE(std::all_of(id_values.begin(), id_values.end(),
                            [&](int32_t id) { return id >= 0 && id < vocab; }));
    max_tokens = std::max<int64_t>(max_tokens, static_cast<int64_t>(id_values.size()));

    const auto pos = positions->to_vector<int32_t>();
    ASSERT_EQ(logits->shape, (std::vector<int64_t>{static_cast<int64_t>(pos.size()), vocab}));
    EXPECT_TRUE(std::is_sorted(pos.begin(), pos.end()));
    EXPECT_EQ(pos.back(), static_cast<int32_t>(id_values.size()) - 1);

    const auto rows = logits->to_vector<float>();
    EXPECT_TRUE(std::all_of(rows.begin(), rows.end(), [](float x) { return std::isfinite(x); }));
    const auto g = greedy->to_vector<int32_t>();
    ASSERT_EQ(g.size(), greedy_len);
    EXPECT_EQ(margin->to_vector<float>().size(), greedy_len);
    const float* last = rows.data() + (pos.size() - 1) * static_cast<size_t>(vocab);
    EXPECT_EQ(std::max_element(last, last + vocab) - last, g[0]);
  }
  EXPECT_GE(max_tokens, 2048) << "golden prompts must reach 2k positions";
}

}  // namespace
}  // namespace s4kv::model
