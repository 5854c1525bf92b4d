#include "model/model_path.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <system_error>
#include <vector>

#include "common/file.h"

namespace s4kv::model {
namespace {

namespace fs = std::filesystem;

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? std::string() : std::string(v);
}

// True for ORG/NAME with both parts non-empty and free of path tricks: an id that could climb
// out of the cache ("../x") is not an id.
bool is_hub_id(const std::string& model) {
  const size_t slash = model.find('/');
  if (slash == std::string::npos || slash == 0 || slash + 1 == model.size()) return false;
  if (model.find('/', slash + 1) != std::string::npos) return false;
  for (const std::string& part : {model.substr(0, slash), model.substr(slash + 1)}) {
    if (part == "." || part == "..") return false;
  }
  return model.find('\\') == std::string::npos;
}

// Names of the sub-directories of dir, sorted.
std::vector<std::string> subdirectories(const std::string& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->is_directory(ec)) names.push_back(it->path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

// The revision refs/main points at: its first line, whitespace trimmed.
std::string read_ref(const std::string& path) {
  auto text = read_file(path, 4096);
  if (!text.is_ok()) return {};
  std::string rev = *text;
  rev.erase(rev.find_last_not_of(" \t\r\n") + 1);
  return rev.substr(0, rev.find('\n'));
}

Result<std::string> resolve_in_cache(const std::string& model) {
  const std::string cache = hf_hub_cache_dir();
  std::string folder = "models--" + model;
  folder.replace(folder.find('/'), 1, "--");
  const std::string repo = cache + "/" + folder;
  const std::string snapshots = repo + "/snapshots";
  if (!is_directory(snapshots)) {
    return not_found("model " + model + ": not a directory, and not in the Hugging Face cache (" +
                     snapshots + " does not exist; S4 KV never downloads)");
  }
  const std::string ref = read_ref(repo + "/refs/main");
  if (!ref.empty()) {
    const std::string dir = snapshots + "/" + ref;
    if (ref.find('/') == std::string::npos && is_directory(dir)) return dir;
    return not_found("model " + model + ": " + repo + "/refs/main names revision " + ref +
                     ", but " + dir + " does not exist");
  }
  const std::vector<std::string> revs = subdirectories(snapshots);
  if (revs.size() == 1) return snapshots + "/" + revs.front();
  if (revs.empty()) return not_found("model " + model + ": " + snapshots + " holds no snapshot");
  std::string list;
  for (const auto& r : revs) list += (list.empty() ? "" : ", ") + r;
  return invalid_argument("model " + model + ": " + snapshots + " holds several snapshots (" +
                          list + ") and no refs/main says which; pass the snapshot directory");
}

}  // namespace

std::string hf_hub_cache_dir() {
  if (std::string v = env("HF_HUB_CACHE"); !v.empty()) return v;
  if (std::string v = env("HF_HOME"); !v.empty()) return v + "/hub";
  return env("HOME") + "/.cache/huggingface/hub";
}

Result<std::string> resolve_model_path(const std::string& model) {
  if (model.empty()) return invalid_argument("--model is empty");
  if (is_directory(model)) return model;
  if (!is_hub_id(model)) {
    return not_found("model " + model + ": no such directory (and not an ORG/NAME id)");
  }
  return resolve_in_cache(model);
}

}  // namespace s4kv::model
