// Model locations: --model is either a directory holding config.json (and weights), or a
// Hugging Face id ORG/NAME already present in the local Hugging Face cache. Resolution never
// touches the network: machines serving S4 KV are often offline, and a server that starts a
// multi-gigabyte download at start-up surprises its operator.
#pragma once

#include <string>

#include "common/status.h"

namespace s4kv::model {

// Returns the directory to load `model` from:
//  1. an existing directory, as given;
//  2. otherwise, for an id ORG/NAME, the snapshot folder
//     <cache>/models--ORG--NAME/snapshots/<rev>, where <cache> is $HF_HUB_CACHE, else
//     $HF_HOME/hub, else ~/.cache/huggingface/hub, and <rev> is named by refs/main or, without
//     it, is the only snapshot present.
// kNotFound names what was looked for; several snapshots without refs/main is
// kInvalidArgument listing them.
Result<std::string> resolve_model_path(const std::string& model);

// The Hugging Face hub cache directory from the environment (see above), without checking
// that it exists.
std::string hf_hub_cache_dir();

}  // namespace s4kv::model
