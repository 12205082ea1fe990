#include "worker/job_data.h"

#include "worker/tensors_dataset.h"

#include <stdexcept>
#include <string>

namespace trainyard {
namespace {

// Datasets for the job: training, and the held-out split for evaluation
// (null when eval_every_steps is 0).
struct Datasets {
  std::shared_ptr<Dataset> train, eval;
};

Datasets MakeDatasets(const JobSpec& spec, const std::vector<int64_t>& sample_shape, int32_t world_size) {
  const bool gpt = spec.model.kind == ModelKind::kGpt;
  const bool eval = spec.eval_every_steps > 0;
  const int64_t eval_size = static_cast<int64_t>(spec.eval_batches) * spec.data.batch_size * world_size;
  Datasets d;
  switch (spec.data.kind) {
    case DataKind::kSynthetic:
      if (gpt) {
        d.train = std::make_shared<SyntheticTokens>(spec.model.context, spec.model.vocab, spec.data.num_samples,
                                                    spec.data.seed);
      } else {
        d.train = std::make_shared<SyntheticDataset>(sample_shape, spec.model.num_classes, spec.data.num_samples,
                                                     spec.data.seed);
      }
      // Held out: samples past the training set, from the same distribution.
      if (eval) d.eval = std::make_shared<OffsetDataset>(d.train, spec.data.num_samples, eval_size);
      break;
    case DataKind::kMnist:
      if (gpt || spec.model.kind == ModelKind::kResNet) {
        throw std::invalid_argument("data.kind mnist: the " + std::string(ModelKindName(spec.model.kind)) +
                                    " model does not take 28x28 images");
      }
      d.train = std::make_shared<MnistDataset>(spec.data.path, /*train=*/true, sample_shape);
      if (eval) d.eval = std::make_shared<MnistDataset>(spec.data.path, /*train=*/false, sample_shape);
      break;
    case DataKind::kTensors: {
      auto all = std::make_shared<TensorsDataset>(spec.data.path, spec.data.inputs, spec.data.targets);
      int64_t want = 1, have = 1;
      for (int64_t d : sample_shape) want *= d;
      for (int64_t d : all->sample_shape()) have *= d;
      if (want != have) {
        throw std::invalid_argument("data " + spec.data.path + ": samples of " + std::to_string(have) +
                                    " values, the " + ModelKindName(spec.model.kind) + " model takes " +
                                    std::to_string(want));
      }
      if (!spec.data.eval_path.empty()) {
        d.train = all;
        if (eval) d.eval = std::make_shared<TensorsDataset>(spec.data.eval_path, spec.data.inputs, spec.data.targets);
      } else {
        // The last eval_fraction of the samples is held out.
        const int64_t held = static_cast<int64_t>(static_cast<double>(all->size()) * spec.data.eval_fraction);
        d.train = all;
        if (held > 0) d.train = std::make_shared<OffsetDataset>(all, 0, all->size() - held);
        if (held > 0 && eval) d.eval = std::make_shared<OffsetDataset>(all, all->size() - held, held);
      }
      break;
    }
    case DataKind::kTokens:
      if (!gpt) throw std::invalid_argument("data.kind tokens: needs the gpt model");
      // The last 10% of the file is held out when evaluating.
      d.train = std::make_shared<TokenFile>(spec.data.path, spec.model.context, spec.model.vocab, spec.data.num_samples,
                                            spec.data.seed, 0.0, eval ? 0.9 : 1.0);
      if (eval) {
        d.eval = std::make_shared<TokenFile>(spec.data.path, spec.model.context, spec.model.vocab, eval_size,
                                             spec.data.seed + 1, 0.9, 1.0);
      }
      break;
  }
  return d;
}

}  // namespace

JobData MakeJobData(const JobSpec& spec, const std::vector<int64_t>& sample_shape, int32_t rank, int32_t world_size) {
  Datasets data = MakeDatasets(spec, sample_shape, world_size);
  JobData out;
  DistributedSampler sampler(data.train->size(), rank, world_size, spec.data.shuffle, spec.data.seed,
                             spec.data.drop_last);
  out.train = std::make_unique<DataLoader>(data.train, sampler, spec.data.batch_size, spec.data.num_workers,
                                           spec.data.prefetch_batches);
  if (data.eval) {
    DistributedSampler eval_sampler(data.eval->size(), rank, world_size, /*shuffle=*/false, 0);
    out.eval = std::make_unique<DataLoader>(data.eval, eval_sampler, spec.data.batch_size);
  }
  return out;
}

}  // namespace trainyard
