// Models a job can train, built from its ModelSpec: one constructor per
// ModelKind, each declared in its model's own header (worker/mlp.h,
// worker/llama.h, ...) and listed in the table of models.cc. Every rank
// builds the same initial weights from the job's seed.
#ifndef TRAINYARD_WORKER_MODELS_MODELS_H_
#define TRAINYARD_WORKER_MODELS_MODELS_H_

#include <cstdint>
#include <memory>

#include "common/job_spec.h"
#include "worker/models/model.h"

namespace trainyard {

// Builds the model with weights drawn from `seed` (identical on every rank).
// Throws std::invalid_argument when the spec cannot be built.
std::shared_ptr<Model> BuildModel(const ModelSpec& spec, uint64_t seed);

}  // namespace trainyard

#endif  // TRAINYARD_WORKER_MODELS_MODELS_H_
