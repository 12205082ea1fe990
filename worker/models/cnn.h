// Cnn: the classic MNIST CNN of model.kind cnn (two 3x3 convolutions,
// max-pool, two linear layers); layers "Conv2d", "Linear".
#ifndef TRAINYARD_WORKER_MODELS_CNN_H_
#define TRAINYARD_WORKER_MODELS_CNN_H_

#include <memory>

#include "common/job_spec.h"
#include "worker/models/model.h"

namespace trainyard {

// The model of `spec` (kind cnn), weights from the default generator.
std::shared_ptr<Model> MakeCnn(const ModelSpec& spec);

}  // namespace trainyard

#endif  // TRAINYARD_WORKER_MODELS_CNN_H_
