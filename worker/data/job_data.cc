#include "worker/data/job_data.h"

#include "common/llama_config.h"
#include "common/spec/model_traits.h"

#include "worker/data/distributed_sampler.h"
#include "worker/data/image_folder.h"
#include "worker/data/mnist_dataset.h"
#include "worker/data/offset_dataset.h"
#include "worker/data/synthetic_dataset.h"
#include "worker/data/synthetic_tokens.h"
#include "worker/data/tensors_dataset.h"
#include "worker/data/token_file.h"

#include <random>
#include <stdexcept>
#include <string>

namespace trainyard {
namespace {

// Datasets for the job: training, and the held-out split for evaluation
// (null when eval_every_steps is 0).
struct Datasets {
  std::shared_ptr<Dataset> train, eval;
};

// image_folder: the transforms for the model's input (C, H, W), the classes
// checked against the model's, the held-out split by a second folder or a
// seeded draw of eval_fraction of the samples.
Datasets MakeImageFolder(const JobSpec& spec, const std::vector<int64_t>& sample_shape,
                         const std::function<void(const std::string&)>& note) {
  const DataSpec& d = spec.data;
  if (sample_shape.size() != 3 || sample_shape[1] != sample_shape[2] ||
      (sample_shape[0] != 1 && sample_shape[0] != 3)) {
    throw std::invalid_argument("data.kind image_folder: the " + std::string(ModelKindName(spec.model.kind)) +
                                " model does not take square 1- or 3-channel images");
  }
  ImageTransform t;
  t.crop = d.crop_size > 0 ? d.crop_size : sample_shape[1];
  if (t.crop != sample_shape[1]) {
    throw std::invalid_argument("data.crop_size " + std::to_string(t.crop) + ": the model takes " +
                                std::to_string(sample_shape[1]) + "x" + std::to_string(sample_shape[2]) + " images");
  }
  t.resize = d.resize > 0 ? d.resize : t.crop;
  t.random_crop = d.random_crop;
  t.random_flip = d.random_flip;
  t.mean = d.mean;
  t.std = d.std;
  t.grayscale = sample_shape[0] == 1;
  std::vector<std::string> classes;
  std::vector<ImageSample> train = ScanImageFolder(d.path, &classes), eval;
  if (static_cast<int64_t>(classes.size()) > spec.model.num_classes) {
    throw std::invalid_argument("image_folder " + d.path + " has " + std::to_string(classes.size()) +
                                " classes; model.num_classes is " + std::to_string(spec.model.num_classes));
  }
  if (!d.eval_path.empty()) {
    std::vector<std::string> eval_classes;
    eval = ScanImageFolder(d.eval_path, &eval_classes);
    if (eval_classes != classes) {
      throw std::invalid_argument("image_folder " + d.eval_path + ": its class folders differ from " + d.path + "'s");
    }
  } else if (d.eval_fraction > 0) {
    // The same draw on every rank: a permutation seeded by the job's seed.
    std::vector<ImageSample> all = std::move(train);
    std::vector<size_t> order(all.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::shuffle(order.begin(), order.end(), std::mt19937_64(d.seed));
    const auto held = static_cast<size_t>(static_cast<double>(all.size()) * d.eval_fraction);
    std::vector<bool> is_eval(all.size(), false);
    for (size_t i = 0; i < held; ++i) is_eval[order[i]] = true;
    train.clear();
    for (size_t i = 0; i < all.size(); ++i) (is_eval[i] ? eval : train).push_back(std::move(all[i]));
  }
  Datasets out;
  out.train = std::make_shared<ImageFolderDataset>(std::move(train), t, /*train=*/true, d.seed, note);
  if (spec.eval_every_steps > 0 && !eval.empty()) {
    out.eval = std::make_shared<ImageFolderDataset>(std::move(eval), t, /*train=*/false, d.seed, note);
  }
  return out;
}

// The vocabulary of a token model: the gpt model's spec, the llama model's
// config.json; 0 for the others.
int64_t TokenVocab(const ModelSpec& m) {
  if (m.kind == ModelKind::kGpt) return m.vocab;
  if (m.kind != ModelKind::kLlama) return 0;
  auto config = ReadLlamaConfig(LlamaConfigSource(m));
  if (!config.ok()) throw std::invalid_argument("model.config: " + std::string(config.status().message()));
  return config->vocab_size;
}

Datasets MakeDatasets(const JobSpec& spec, const std::vector<int64_t>& sample_shape, int32_t world_size,
                      const std::function<void(const std::string&)>& note) {
  const int64_t vocab = TokenVocab(spec.model);
  const bool gpt = vocab > 0;  // a token model
  const bool eval = spec.eval_every_steps > 0;
  const int64_t eval_size = static_cast<int64_t>(spec.eval_batches) * spec.data.batch_size * world_size;
  Datasets d;
  switch (spec.data.kind) {
    case DataKind::kSynthetic:
      if (gpt) {
        d.train = std::make_shared<SyntheticTokens>(spec.model.context, vocab, spec.data.num_samples, spec.data.seed);
      } else {
        d.train = std::make_shared<SyntheticDataset>(sample_shape, spec.model.num_classes, spec.data.num_samples,
                                                     spec.data.seed);
      }
      // Held out: samples past the training set, from the same distribution.
      if (eval) d.eval = std::make_shared<OffsetDataset>(d.train, spec.data.num_samples, eval_size);
      break;
    case DataKind::kMnist:
      if (!TraitsOf(spec.model.kind).Takes(DataKind::kMnist)) {
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
    case DataKind::kImageFolder: d = MakeImageFolder(spec, sample_shape, note); break;
    case DataKind::kTokens:
      if (!TraitsOf(spec.model.kind).Takes(DataKind::kTokens)) {
        throw std::invalid_argument("data.kind tokens: needs a token model (gpt, llama)");
      }
      // The last 10% of the stream is held out when evaluating.
      d.train = std::make_shared<TokenFile>(spec.data.path, spec.data.token_dtype, spec.model.context, vocab,
                                            spec.data.num_samples, spec.data.seed, 0.0, eval ? 0.9 : 1.0);
      if (eval) {
        d.eval = std::make_shared<TokenFile>(spec.data.path, spec.data.token_dtype, spec.model.context, vocab,
                                             eval_size, spec.data.seed + 1, 0.9, 1.0);
      }
      break;
  }
  return d;
}

}  // namespace

JobData MakeJobData(const JobSpec& spec, const std::vector<int64_t>& sample_shape, int32_t rank, int32_t world_size,
                    std::function<void(const std::string&)> note) {
  Datasets data = MakeDatasets(spec, sample_shape, world_size, note);
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
