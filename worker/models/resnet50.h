// ResNet50: torchvision's resnet50 as model.kind resnet50 — the 7x7 stem and
// max-pool, Bottleneck blocks [3, 4, 6, 3] (stride on the 3x3 convolution,
// "ResNet v1.5"), global average pooling and fc — with torchvision's
// parameter and buffer names (conv1.weight, layer1.0.downsample.1.running_mean,
// fc.bias, ...), so that a checkpoint of it loads into
// torchvision.models.resnet50(num_classes=...) with load_state_dict(strict=True)
// and torchvision's weights load through model.init_from. Layers "Stem",
// "Bottleneck" x 16, "Head". BatchNorm's running statistics and
// num_batches_tracked are buffers, as torchvision's.
#ifndef TRAINYARD_WORKER_MODELS_RESNET50_H_
#define TRAINYARD_WORKER_MODELS_RESNET50_H_

#include <memory>

#include "common/job_spec.h"
#include "worker/models/model.h"

namespace trainyard {

// The model of `spec` (kind resnet50: image_size, num_classes), initialized
// as torchvision initializes it, from the default generator.
std::shared_ptr<Model> MakeResNet50(const ModelSpec& spec);

}  // namespace trainyard

#endif  // TRAINYARD_WORKER_MODELS_RESNET50_H_
