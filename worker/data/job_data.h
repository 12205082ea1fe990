// The data of one job on one rank: its training loader and, when the job
// evaluates, the held-out loader — built from the spec's data section for
// the model's input shape.
#ifndef TRAINYARD_WORKER_DATA_JOB_DATA_H_
#define TRAINYARD_WORKER_DATA_JOB_DATA_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/job_spec.h"
#include "worker/data/data_loader.h"

namespace trainyard {

struct JobData {
  std::unique_ptr<DataLoader> train;
  std::unique_ptr<DataLoader> eval;  // null unless eval_every_steps > 0
};

// `sample_shape`: one input sample's shape as the model takes it. Throws
// std::invalid_argument when the data does not fit the model. `note` gets
// what the people running the job should see (skipped input files), from
// the loader's threads.
JobData MakeJobData(const JobSpec& spec, const std::vector<int64_t>& sample_shape, int32_t rank, int32_t world_size,
                    std::function<void(const std::string&)> note = {});

}  // namespace trainyard

#endif  // TRAINYARD_WORKER_DATA_JOB_DATA_H_
