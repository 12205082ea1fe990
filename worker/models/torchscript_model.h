// TorchScriptModel: a user's module of model.kind torchscript, saved from
// Python with torch.jit.script(model).save(PATH); one layer "TorchScript".
#ifndef TRAINYARD_WORKER_MODELS_TORCHSCRIPT_MODEL_H_
#define TRAINYARD_WORKER_MODELS_TORCHSCRIPT_MODEL_H_

#include <memory>

#include "common/job_spec.h"
#include "worker/models/model.h"

namespace trainyard {

// Loads spec.path; throws std::runtime_error when it cannot.
std::shared_ptr<Model> MakeTorchScriptModel(const ModelSpec& spec);

}  // namespace trainyard

#endif  // TRAINYARD_WORKER_MODELS_TORCHSCRIPT_MODEL_H_
