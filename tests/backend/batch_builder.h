// Test helper: the backend tests build batches with the same builder the engine uses.
#pragma once

#include "backend/forward_batch_builder.h"

namespace s4kv::backend::testing {

using BatchBuilder = ForwardBatchBuilder;

}  // namespace s4kv::backend::testing
