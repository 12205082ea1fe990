// Mlp: the multi-layer perceptron of model.kind mlp (input → hidden...
// (ReLU) → num_classes); layers "Linear".
#ifndef TRAINYARD_WORKER_MODELS_MLP_H_
#define TRAINYARD_WORKER_MODELS_MLP_H_

#include <memory>

#include "common/job_spec.h"
#include "worker/models/model.h"

namespace trainyard {

// The model of `spec` (kind mlp), weights from the default generator.
std::shared_ptr<Model> MakeMlp(const ModelSpec& spec);

}  // namespace trainyard

#endif  // TRAINYARD_WORKER_MODELS_MLP_H_
