// The data readers: MNIST (IDX, plain and gzip), token files and shards,
// tensor files, the loader's threads and the distributed sampler; an MNIST
// job over real Gloo (ranks as threads).
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "tests/test_util.h"
#include "tests/worker/trainer_test_util.h"
#include "worker/base/safetensors.h"
#include "worker/data/data.h"
#include "worker/data/data_loader.h"
#include "worker/data/distributed_sampler.h"
#include "worker/data/job_data.h"
#include "worker/data/mnist_dataset.h"
#include "worker/data/synthetic_dataset.h"
#include "worker/data/token_file.h"

namespace trainyard {
namespace {

void WriteBigEndian(std::string* out, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) out->push_back(static_cast<char>((v >> s) & 0xff));
}

void WriteFile(const std::string& path, const std::string& data, bool gzip) {
  if (gzip) {
    gzFile f = gzopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(gzwrite(f, data.data(), static_cast<unsigned>(data.size())), static_cast<int>(data.size()));
    gzclose(f);
  } else {
    std::ofstream(path, std::ios::binary) << data;
  }
}

// n images whose pixel (i, j) of image k is (k + i + j) % 256, label k % 10.
void WriteMnist(const std::string& dir, const std::string& split, int n, bool gzip) {
  std::string images, labels;
  WriteBigEndian(&images, 0x803);
  WriteBigEndian(&images, n);
  WriteBigEndian(&images, 28);
  WriteBigEndian(&images, 28);
  WriteBigEndian(&labels, 0x801);
  WriteBigEndian(&labels, n);
  for (int k = 0; k < n; ++k) {
    for (int i = 0; i < 28; ++i) {
      for (int j = 0; j < 28; ++j) images.push_back(static_cast<char>((k + i + j) % 256));
    }
    labels.push_back(static_cast<char>(k % 10));
  }
  const std::string gz = gzip ? ".gz" : "";
  WriteFile(dir + "/" + split + "-images-idx3-ubyte" + gz, images, gzip);
  WriteFile(dir + "/" + split + "-labels-idx1-ubyte" + gz, labels, gzip);
}

TEST(Data, MnistIdxPlainAndGzip) {
  for (bool gzip : {false, true}) {
    TempDir dir;
    WriteMnist(dir.path(), "train", 300, gzip);
    MnistDataset d(dir.path(), true, {1, 28, 28});
    ASSERT_EQ(d.size(), 300);
    Batch b = d.Get({0, 7, 299});
    ASSERT_EQ(b.inputs.sizes(), (std::vector<int64_t>{3, 1, 28, 28}));
    EXPECT_EQ(b.targets[1].item<int64_t>(), 7);
    EXPECT_EQ(b.targets[2].item<int64_t>(), 9);
    const double pixel = ((7 + 2 + 5) % 256 / 255.0 - 0.1307) / 0.3081;
    EXPECT_NEAR(b.inputs[1][0][2][5].item<double>(), pixel, 1e-6);
  }
}

TEST(Data, MnistErrorsNameTheFile) {
  TempDir dir;
  WriteMnist(dir.path(), "train", 10, false);
  std::ofstream(dir.path() + "/train-labels-idx1-ubyte", std::ios::binary) << "garbage!";
  try {
    MnistDataset d(dir.path(), true, {784});
    FAIL() << "read a broken label file";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("train-labels-idx1-ubyte"), std::string::npos) << e.what();
  }
  EXPECT_THROW(MnistDataset(dir.path() + "/none", true, {784}), std::runtime_error);
}

TEST(Data, MnistJobTrainsAndEvaluatesOnT10k) {
  TempDir dir;
  WriteMnist(dir.path(), "train", 400, true);
  WriteMnist(dir.path(), "t10k", 100, false);
  JobSpec spec = Mlp(16, 1);
  spec.data.kind = DataKind::kMnist;
  spec.data.path = dir.path();
  spec.max_steps = 30;
  spec.eval_every_steps = 30;
  spec.eval_batches = 2;
  Lrs m;
  RunTrainers(
      spec, 2, [&](int, Trainer& t) { t.Run(); }, &m);
  EXPECT_FALSE(std::isnan(m.eval[30]));
  EXPECT_LT(m.loss.back(), m.loss.front());
}

TEST(Data, TokenFileWindows) {
  TempDir dir;
  const std::string path = dir.path() + "/train.bin";
  // Token i is i: a window's first token says where in the file it starts.
  std::vector<uint16_t> tokens(1000);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint16_t>(i);
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(tokens.data()), 2000);
  constexpr int64_t kVocab = 1024, kContext = 16;
  TokenFile f(path, TokenDtype::kUint16, kContext, kVocab, 100, 3, 0.0, 0.9);
  EXPECT_EQ(f.tokens(), 1000);
  Batch b = f.Get({0, 1, 2});
  ASSERT_EQ(b.inputs.sizes(), (std::vector<int64_t>{3, kContext}));
  for (int64_t i = 0; i < 3; ++i) {
    // Each window is consecutive tokens: targets are inputs shifted by one.
    EXPECT_TRUE(torch::equal(b.inputs[i].narrow(0, 1, kContext - 1), b.targets[i].narrow(0, 0, kContext - 1)));
    EXPECT_EQ(b.inputs[i][1].item<int64_t>() - b.inputs[i][0].item<int64_t>(), 1);
  }
  EXPECT_TRUE(torch::equal(f.Get({5}).inputs, f.Get({5}).inputs));  // deterministic
  // The training split: every window starts in the first 90%. The held-out
  // tail: every window starts in the last 10% and fits in the file.
  std::vector<int64_t> all(100);
  std::iota(all.begin(), all.end(), 0);
  const at::Tensor train_starts = f.Get(all).inputs.select(1, 0);
  EXPECT_LT(train_starts.max().item<int64_t>(), 900);
  TokenFile tail(path, TokenDtype::kUint16, kContext, kVocab, 50, 3, 0.9, 1.0);
  std::vector<int64_t> held(50);
  std::iota(held.begin(), held.end(), 0);
  const Batch t = tail.Get(held);
  EXPECT_GE(t.inputs.select(1, 0).min().item<int64_t>(), 900);
  EXPECT_LE(t.targets.select(1, kContext - 1).max().item<int64_t>(), 999);
  EXPECT_GT(t.inputs.select(1, 0).max().item<int64_t>() - t.inputs.select(1, 0).min().item<int64_t>(), 10)
      << "held-out windows should spread over the tail";
  EXPECT_THROW(TokenFile(path, TokenDtype::kUint16, kContext, 40, 10, 3).Get({0, 1, 2, 3, 4, 5}),
               std::runtime_error);                                                             // tokens >= vocab
  EXPECT_THROW(TokenFile(path, TokenDtype::kUint16, 2000, kVocab, 10, 3), std::runtime_error);  // too short
}

// uint32 ids in a directory of shards: one stream in name order, windows
// across shard ends, ids past 65535 intact, a bad id named by its shard.
TEST(Data, TokenShardsOfUint32) {
  TempDir dir;
  constexpr uint32_t kBase = 100000;  // every id needs more than 16 bits
  // Token i of the stream is kBase + i; shards of 300, 500 and 200 tokens,
  // written out of name order, and a file that is not a shard.
  const std::vector<std::pair<std::string, std::pair<uint32_t, uint32_t>>> shards = {
      {"b_001.bin", {300, 800}}, {"a_000.bin", {0, 300}}, {"c_002.bin", {800, 1000}}};
  for (const auto& [name, range] : shards) {
    std::vector<uint32_t> ids;
    for (uint32_t i = range.first; i < range.second; ++i) ids.push_back(kBase + i);
    std::ofstream(dir.path() + "/" + name, std::ios::binary)
        .write(reinterpret_cast<const char*>(ids.data()), static_cast<std::streamsize>(ids.size() * 4));
  }
  std::ofstream(dir.path() + "/README.txt") << "not tokens";
  constexpr int64_t kContext = 64;
  TokenFile f(dir.path(), TokenDtype::kUint32, kContext, 128256, 400, 7);
  EXPECT_EQ(f.tokens(), 1000);
  std::vector<int64_t> all(400);
  std::iota(all.begin(), all.end(), 0);
  const Batch b = f.Get(all);
  const at::Tensor starts = b.inputs.select(1, 0) - kBase;
  // Each window is kContext + 1 consecutive ids of the stream.
  const at::Tensor expected = starts.unsqueeze(1) + torch::arange(kContext, torch::kLong).unsqueeze(0) + kBase;
  EXPECT_TRUE(torch::equal(b.inputs, expected));
  EXPECT_TRUE(torch::equal(b.targets, expected + 1));
  // Some windows span the ends of the first and second shards.
  const at::Tensor spans =
      ((starts < 300) & (starts + kContext >= 300)) | ((starts < 800) & (starts + kContext >= 800));
  EXPECT_GT(spans.sum().item<int64_t>(), 0);
  // Read as uint16, the ids would be other numbers: the width matters.
  TokenFile narrow(dir.path(), TokenDtype::kUint16, kContext, 1 << 16, 10, 7);
  EXPECT_EQ(narrow.tokens(), 2000);
  // An id past the vocabulary fails naming the shard it is in.
  try {
    TokenFile(dir.path(), TokenDtype::kUint32, kContext, kBase + 850, 400, 7).Get(all);
    ADD_FAILURE() << "an id past the vocabulary was read";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("c_002.bin"), std::string::npos) << e.what();
  }
  // A size that is not a whole number of uint32 ids.
  std::ofstream(dir.path() + "/d_003.bin", std::ios::binary) << "abc";
  EXPECT_THROW(TokenFile(dir.path(), TokenDtype::kUint32, kContext, 128256, 10, 7), std::runtime_error);
}

// data kind tensors: samples are rows of named tensors in safetensors files
// (here two files of a directory, 60 + 40 samples whose input is their
// index). Over 2 ranks every training sample is seen exactly once per epoch,
// and the held-out split (the last 20%) is disjoint from it.
TEST(Data, TensorFilesEverySampleOncePerEpochAndAHeldOutSplit) {
  TempDir dir;
  const std::string data = dir.path() + "/data";
  std::filesystem::create_directories(data);
  int64_t next = 0;
  for (const auto& [file, n] : {std::pair{"a.safetensors", 60}, std::pair{"b.safetensors", 40}}) {
    at::Tensor inputs = at::arange(next, next + n, at::kFloat).view({n, 1}).repeat({1, 4}).contiguous();
    at::Tensor targets = (at::arange(next, next + n, at::kLong) % 10).contiguous();
    next += n;
    WriteSafetensors(data + "/" + file, {{"x", at::kFloat, {n, 4}}, {"y", at::kLong, {n}}},
                     [&](size_t i) { return i == 0 ? inputs : targets; });
  }
  JobSpec spec;
  spec.model.input_size = 4;
  spec.data.kind = DataKind::kTensors;
  spec.data.path = data;
  spec.data.inputs = "x";
  spec.data.targets = "y";
  spec.data.eval_fraction = 0.2;
  spec.data.batch_size = 8;
  spec.eval_every_steps = 10;
  std::vector<int64_t> seen, held;
  for (int rank = 0; rank < 2; ++rank) {
    JobData d = MakeJobData(spec, {4}, rank, 2);
    ASSERT_TRUE(d.eval);
    for (int b = 0; b < 5; ++b) {  // 80 training samples: 40 per rank, 5 batches of 8
      Batch batch = d.train->Next();
      ASSERT_EQ(batch.inputs.sizes(), (std::vector<int64_t>{8, 4}));
      for (int64_t i = 0; i < 8; ++i) {
        const int64_t v = static_cast<int64_t>(batch.inputs[i][3].item<float>());
        seen.push_back(v);
        EXPECT_EQ(batch.targets[i].item<int64_t>(), v % 10);
      }
    }
    d.train->Next();
    EXPECT_EQ(d.train->epoch(), 1) << "one epoch is 5 batches per rank";
    for (int b = 0; b < 2; ++b) {  // 20 held out: 10 per rank
      Batch batch = d.eval->Next();
      for (int64_t i = 0; i < batch.inputs.size(0); ++i) held.push_back(batch.inputs[i][0].item<float>());
    }
  }
  std::sort(seen.begin(), seen.end());
  std::vector<int64_t> want(80);
  std::iota(want.begin(), want.end(), 0);
  EXPECT_EQ(seen, want);
  for (int64_t v : held) EXPECT_GE(v, 80) << "held-out sample " << v << " is a training sample";
  // A name the files do not have is named.
  spec.data.inputs = "pixels";
  try {
    MakeJobData(spec, {4}, 0, 2);
    ADD_FAILURE() << "accepted a missing tensor";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("a.safetensors: has no tensor 'pixels'"), std::string::npos) << e.what();
  }
}

// Loader threads read ahead, and change nothing: the same batches in the
// same order across epochs and after a Seek (as a resume does), with the
// position of what was consumed; a reading error reaches the training thread.
TEST(Data, LoaderWorkersGiveTheSameBatchesInOrder) {
  auto data = std::make_shared<SyntheticDataset>(std::vector<int64_t>{6}, 5, 50, 7);
  auto batches = [&](int workers, int64_t seek_epoch, int64_t seek_offset) {
    DataLoader loader(data, DistributedSampler(50, 1, 2, true, 3), 4, workers, 3);
    if (seek_epoch >= 0) loader.Seek(seek_epoch, seek_offset);
    std::vector<at::Tensor> out;
    std::vector<std::pair<int64_t, int64_t>> positions;
    for (int i = 0; i < 20; ++i) {  // 25 samples per rank: 7 batches an epoch, ~3 epochs
      Batch b = loader.Next();
      out.push_back(at::cat({b.inputs.flatten(), b.targets.to(at::kFloat)}));
      positions.emplace_back(loader.epoch(), loader.offset());
    }
    return std::make_pair(out, positions);
  };
  for (int64_t seek : {-1, 1}) {
    const auto [want, want_pos] = batches(0, seek, seek >= 0 ? 8 : 0);
    for (int workers : {1, 3}) {
      const auto [got, got_pos] = batches(workers, seek, seek >= 0 ? 8 : 0);
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < want.size(); ++i) EXPECT_TRUE(torch::equal(got[i], want[i])) << workers << " batch " << i;
      EXPECT_EQ(got_pos, want_pos) << workers;
    }
  }
  class Failing final : public Dataset {
   public:
    int64_t size() const override { return 8; }
    Batch Get(const std::vector<int64_t>&) const override { throw std::runtime_error("unreadable sample"); }
  };
  DataLoader failing(std::make_shared<Failing>(), DistributedSampler(8, 0, 1, false, 0), 2, 2, 2);
  EXPECT_THROW(
      {
        try {
          failing.Next();
        } catch (const std::runtime_error& e) {
          EXPECT_STREQ(e.what(), "unreadable sample");
          throw;
        }
      },
      std::runtime_error);
}

TEST(Data, SamplerDisjointReshuffledAndDropLast) {
  const int64_t n = 103;
  std::set<int64_t> seen;
  for (int r = 0; r < 4; ++r) {
    DistributedSampler s(n, r, 4, true, 7, /*drop_last=*/true);
    const auto idx = s.Indices(0);
    EXPECT_EQ(static_cast<int64_t>(idx.size()), n / 4);
    for (int64_t i : idx) EXPECT_TRUE(seen.insert(i).second) << "index " << i << " on two ranks";
    EXPECT_NE(s.Indices(0), s.Indices(1));  // reshuffled per epoch
    EXPECT_EQ(s.Indices(1), DistributedSampler(n, r, 4, true, 7, true).Indices(1));
  }
  EXPECT_EQ(seen.size(), static_cast<size_t>(n / 4 * 4));
  // Without drop_last the tail wraps around: every index appears.
  std::set<int64_t> all;
  for (int r = 0; r < 4; ++r) {
    for (int64_t i : DistributedSampler(n, r, 4, true, 7).Indices(0)) all.insert(i);
  }
  EXPECT_EQ(all.size(), static_cast<size_t>(n));
}

}  // namespace
}  // namespace trainyard
