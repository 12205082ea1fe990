// ResNet: the ResNet-18 (CIFAR variant) of model.kind resnet; layers
// "Stem", "BasicBlock", "Linear". BatchNorm's running statistics are buffers.
#ifndef TRAINYARD_WORKER_MODELS_RESNET_H_
#define TRAINYARD_WORKER_MODELS_RESNET_H_

#include <memory>

#include "common/job_spec.h"
#include "worker/models/model.h"

namespace trainyard {

// The model of `spec` (kind resnet), weights from the default generator.
std::shared_ptr<Model> MakeResNet(const ModelSpec& spec);

}  // namespace trainyard

#endif  // TRAINYARD_WORKER_MODELS_RESNET_H_
