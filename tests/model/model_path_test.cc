// --model resolution: directories as given, ORG/NAME ids in a fake Hugging Face cache built
// under $S4KV_TEST_TMP with HF_HOME / HF_HUB_CACHE pointed at it. Never the network.
#include "model/model_path.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>

namespace s4kv::model {
namespace {

namespace fs = std::filesystem;

class ModelPathTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* name : {"HF_HOME", "HF_HUB_CACHE", "HOME"}) {
      const char* v = std::getenv(name);
      saved_[name] = v == nullptr ? std::nullopt : std::optional<std::string>(v);
    }
    const char* tmp = std::getenv("S4KV_TEST_TMP");
    root_ = fs::path(tmp != nullptr ? tmp : "/tmp") / "model_path_test";
    fs::remove_all(root_);
    fs::create_directories(root_);
    ::setenv("HF_HOME", (root_ / "hf").c_str(), 1);
    ::unsetenv("HF_HUB_CACHE");
  }
  void TearDown() override {
    for (const auto& [name, v] : saved_) {
      if (v)
        ::setenv(name.c_str(), v->c_str(), 1);
      else
        ::unsetenv(name.c_str());
    }
  }

  // Creates <hub>/models--ORG--NAME/snapshots/<rev> for each rev, and refs/main if given.
  std::string make_repo(const fs::path& hub, const std::string& folder,
                        std::initializer_list<const char*> revs, const char* ref_main) {
    const fs::path repo = hub / folder;
    for (const char* rev : revs) fs::create_directories(repo / "snapshots" / rev);
    if (ref_main != nullptr) {
      fs::create_directories(repo / "refs");
      std::ofstream(repo / "refs" / "main") << ref_main;  // no trailing newline, as the hub writes
    }
    return repo.string();
  }

  fs::path root_;
  std::map<std::string, std::optional<std::string>> saved_;
};

TEST_F(ModelPathTest, ExistingDirectoryIsUsedAsIs) {
  const std::string dir = (root_ / "Qwen" / "local").string();
  fs::create_directories(dir);
  auto p = resolve_model_path(dir);
  ASSERT_TRUE(p.is_ok()) << p.status().message();
  EXPECT_EQ(*p, dir);
  // A relative ORG/NAME that exists as a directory wins over the cache as well.
  EXPECT_EQ(*resolve_model_path("tests/fixtures"), "tests/fixtures");
}

TEST_F(ModelPathTest, RefsMainPicksTheSnapshot) {
  const std::string repo = make_repo(root_ / "hf" / "hub", "models--Qwen--Qwen2.5-7B-Instruct",
                                     {"aaaa", "bbbb"}, "bbbb");
  auto p = resolve_model_path("Qwen/Qwen2.5-7B-Instruct");
  ASSERT_TRUE(p.is_ok()) << p.status().message();
  EXPECT_EQ(*p, repo + "/snapshots/bbbb");
}

TEST_F(ModelPathTest, RefsMainWithTrailingNewline) {
  const std::string repo =
      make_repo(root_ / "hf" / "hub", "models--org--m", {"c0ffee"}, "c0ffee\n");
  EXPECT_EQ(*resolve_model_path("org/m"), repo + "/snapshots/c0ffee");
}

TEST_F(ModelPathTest, HfHubCacheWinsOverHfHome) {
  make_repo(root_ / "hf" / "hub", "models--org--m", {"fromhome"}, nullptr);
  const std::string repo = make_repo(root_ / "hubcache", "models--org--m", {"fromcache"}, nullptr);
  ::setenv("HF_HUB_CACHE", (root_ / "hubcache").c_str(), 1);
  EXPECT_EQ(*resolve_model_path("org/m"), repo + "/snapshots/fromcache");
}

TEST_F(ModelPathTest, DefaultCacheUnderHome) {
  ::unsetenv("HF_HOME");
  ::setenv("HOME", (root_ / "home").c_str(), 1);
  EXPECT_EQ(hf_hub_cache_dir(), (root_ / "home" / ".cache" / "huggingface" / "hub").string());
  const fs::path hub = root_ / "home" / ".cache" / "huggingface" / "hub";
  const std::string repo = make_repo(hub, "models--org--m", {"r1"}, nullptr);
  EXPECT_EQ(*resolve_model_path("org/m"), repo + "/snapshots/r1");
}

TEST_F(ModelPathTest, OnlySnapshotWithoutRefs) {
  const std::string repo =
      make_repo(root_ / "hf" / "hub", "models--meta-llama--Llama-3.1-8B", {"0123abcd"}, nullptr);
  EXPECT_EQ(*resolve_model_path("meta-llama/Llama-3.1-8B"), repo + "/snapshots/0123abcd");
}

TEST_F(ModelPathTest, SeveralSnapshotsWithoutRefsAreListed) {
  const std::string repo = make_repo(root_ / "hf" / "hub", "models--org--m", {"r2", "r1"}, nullptr);
  auto p = resolve_model_path("org/m");
  EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(p.status().message(), "model org/m: " + repo +
                                      "/snapshots holds several snapshots (r1, r2) and no "
                                      "refs/main says which; pass the snapshot directory");
}

TEST_F(ModelPathTest, RefsMainToMissingSnapshot) {
  const std::string repo = make_repo(root_ / "hf" / "hub", "models--org--m", {"r1"}, "r9");
  auto p = resolve_model_path("org/m");
  EXPECT_EQ(p.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(p.status().message(), "model org/m: " + repo + "/refs/main names revision r9, but " +
                                      repo + "/snapshots/r9 does not exist");
}

TEST_F(ModelPathTest, NotInCacheNamesWhatWasLookedFor) {
  auto p = resolve_model_path("Qwen/Qwen2.5-1.5B-Instruct");
  EXPECT_EQ(p.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(p.status().message(),
            "model Qwen/Qwen2.5-1.5B-Instruct: not a directory, and not in the Hugging Face "
            "cache (" +
                (root_ / "hf" / "hub").string() +
                "/models--Qwen--Qwen2.5-1.5B-Instruct/snapshots does not exist; S4 KV never "
                "downloads)");
}

TEST_F(ModelPathTest, EmptySnapshotsFolder) {
  fs::create_directories(root_ / "hf" / "hub" / "models--org--m" / "snapshots");
  auto p = resolve_model_path("org/m");
  EXPECT_EQ(p.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(p.status().message().ends_with("/snapshots holds no snapshot"));
}

TEST_F(ModelPathTest, NonIdsAreNotLookedUp) {
  for (const char* model : {"no-such-dir", "/abs/no/such", "a/b/c", "../s4kv-no-such-model",
                            "org/..", "/s4kv-no-such-model", "org/"}) {
    auto p = resolve_model_path(model);
    EXPECT_EQ(p.status().code(), StatusCode::kNotFound) << model;
    EXPECT_EQ(p.status().message(),
              std::string("model ") + model + ": no such directory (and not an ORG/NAME id)");
  }
  EXPECT_EQ(resolve_model_path("").status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace s4kv::model
