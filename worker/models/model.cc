#include "worker/models/model.h"

#include <torch/torch.h>

#include "worker/models/activation_checkpoint.h"

namespace trainyard {

std::vector<Layer> Model::stages() {
  std::vector<Layer> out = layers();
  if (checkpointed_type_.empty()) return out;
  for (Layer& layer : out) {
    if (layer.type == checkpointed_type_) layer.forward = Checkpointed(std::move(layer.forward));
  }
  return out;
}

}  // namespace trainyard
