// Gpt: the small GPT-2 style decoder of model.kind gpt (token ids [B, T]
// → logits [B, T, vocab]); layers "Embedding", "Block", "Head".
#ifndef TRAINYARD_WORKER_MODELS_GPT_H_
#define TRAINYARD_WORKER_MODELS_GPT_H_

#include <memory>

#include "common/job_spec.h"
#include "worker/models/model.h"

namespace trainyard {

// The model of `spec` (kind gpt), weights from the default generator.
std::shared_ptr<Model> MakeGpt(const ModelSpec& spec);

}  // namespace trainyard

#endif  // TRAINYARD_WORKER_MODELS_GPT_H_
