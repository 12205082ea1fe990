#include "server/jobs/job_progress.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/clock.h"

namespace trainyard {

void JobProgress::Launched(SteadyTime now, int32_t ranks) {
  metrics_->SetJobRanks(job_id_, ranks);
  goodput_.StartOnce(now);
  last_progress_ = now;
  if (recovery_from_millis_ == 0) startup_from_millis_ = clock_->UnixMillis();
}

void JobProgress::Adopted(SteadyTime now, int32_t ranks) {
  metrics_->SetJobRanks(job_id_, ranks);
  goodput_.StartOnce(now);
  last_progress_ = now;
}

void JobProgress::FailureDetected(int64_t step) {
  if (recovery_from_millis_ != 0) return;
  recovery_from_millis_ = clock_->UnixMillis();
  step_at_failure_ = step;
}

std::vector<StepMetrics> JobProgress::OnSamples(const std::vector<StepMetrics>& samples, JobRecord* record,
                                                SteadyTime now, int32_t lead) {
  std::vector<StepMetrics> updates;
  for (const StepMetrics& m : samples) {
    metrics_->RecordStep(job_id_, m);
    StepMetrics& last = last_[m.rank];
    const int64_t xids = last.gpu_xid_errors + m.gpu_xid_errors;  // a sample carries the new ones
    last = m;
    last.gpu_xid_errors = xids;
    stragglers_.Observe(m.rank, now, m.forward_seconds);
    if (m.rank != lead) continue;
    last_progress_ = now;
    failures_in_a_row_ = 0;
    goodput_.AddStep(m.step, m.step_seconds);
    if (m.step_seconds > 0) {
      step_seconds_ = step_seconds_ == 0 ? m.step_seconds : 0.9 * step_seconds_ + 0.1 * m.step_seconds;
    }
    metrics_->AddBadput(job_id_, "data_wait", m.data_seconds);
    const int64_t at = m.unix_millis > 0 ? m.unix_millis : clock_->UnixMillis();
    // Until this step began: the time before it was no step's.
    const double before_step = static_cast<double>(at) / 1000.0 - m.step_seconds;
    if (recovery_from_millis_ != 0 && m.step > 0) {
      // The first step of the attempt after a failure: resumed at m.step - 1.
      metrics_->RecordRecovery(job_id_, std::max<int64_t>(0, at - recovery_from_millis_) / 1000.0,
                               std::max<int64_t>(0, step_at_failure_ - (m.step - 1)));
      metrics_->AddBadput(job_id_, "restart", before_step - recovery_from_millis_ / 1000.0);
      recovery_from_millis_ = 0;
      startup_from_millis_ = 0;
    }
    if (startup_from_millis_ != 0) {
      metrics_->AddBadput(job_id_, "startup", before_step - startup_from_millis_ / 1000.0);
      startup_from_millis_ = 0;
    }
    if (record->step == 0 || m.step < record->step) record->first_loss = m.loss;
    record->step = m.step;
    record->loss = m.loss;
    if (m.total_steps > 0) record->max_steps = m.total_steps;  // a script's own length, as it says it
    double total = 0;
    for (const auto& [rank, sample] : last_) total += sample.samples_per_second;
    record->samples_per_second = total;
    StepMetrics agg = m;
    agg.samples_per_second = total;
    agg.peak_flops = metrics_->PeakFlopsOf(m);  // the history's MFU is /metrics' (--peak-flops)
    updates.push_back(agg);
  }
  const double ratio = goodput_.Ratio(now);
  if (ratio >= 0) metrics_->SetGoodput(job_id_, ratio);
  return updates;
}

std::string JobProgress::OnCheckpoint(const CheckpointEvent& c, SteadyTime now) {
  metrics_->RecordCheckpoint(job_id_, c);
  metrics_->AddBadput(job_id_, "checkpoint_blocking", c.blocking_seconds);
  last_progress_ = now;
  if (!c.ok) return absl::StrCat(c.trigger, " checkpoint at step ", c.step, " failed: ", c.error);
  goodput_.Checkpointed(c.step);
  return absl::StrCat(c.trigger, " checkpoint ", c.index, " at step ", c.step, " (", CheckpointTypeName(c.type), ", ",
                      c.bytes, " bytes, ", absl::StrFormat("%.2f", c.seconds), " s",
                      c.host_bytes > 0 ? absl::StrFormat(", training waited %.2f s", c.blocking_seconds) : "",
                      "): ", c.path);
}

void JobProgress::AttemptEnded() {
  metrics_->AddBadput(job_id_, "lost_work", goodput_.Unkept());
  goodput_.AttemptEnded();
  last_.clear();
  stragglers_ = StragglerWatch();
}

std::vector<StepMetrics> JobProgress::RankSamples(int32_t first, int32_t count) const {
  std::vector<StepMetrics> out;
  const int64_t end = static_cast<int64_t>(first) + count;
  for (auto it = last_.lower_bound(first); it != last_.end() && it->first < end; ++it) out.push_back(it->second);
  return out;
}

bool JobProgress::PersistDue(SteadyTime now) {
  if (now - last_persist_ <= std::chrono::seconds(1)) return false;
  last_persist_ = now;
  return true;
}

}  // namespace trainyard
