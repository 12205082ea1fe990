// The hang watchdog's rules for one running job, on a fake clock: no
// progress within step_timeout_s asks the ranks, their answers (or the end
// of the wait) call the job hung; progress in between calls it off.
#include "server/jobs/hang_watchdog.h"

#include <gtest/gtest.h>

#include "tests/server/coordinator_parts.h"

namespace trainyard {
namespace {

class HangWatchdogTest : public ::testing::Test {
 protected:
  // A running job of two ranks with step_timeout_s 10.
  void SetUp() override {
    job_ = &p_.Submit("max_steps: 100\nnum_processes: 2\nstep_timeout_s: 10\n");
    for (int rank = 0; rank < 2; ++rank) {
      auto w = p_.workers.Attach(job_->record.id, rank, 1, job_->record.worker_token, "", 0);
      ASSERT_TRUE(w.ok()) << w.status();
      channels_.push_back(w->channel);
    }
    ASSERT_EQ(job_->record.state, JobState::kRunning);
  }
  HangVerdict Look() { return CheckForHang(*job_, p_.clock, &p_.requests, std::chrono::seconds(5)); }
  bool Asked(int rank, int64_t* request_id) {
    WorkerCommand cmd;
    if (!channels_[rank]->Pop(&cmd, std::chrono::milliseconds(0))) return false;
    *request_id = cmd.request_id;
    return cmd.kind == WorkerCommand::Kind::kDiagnose;
  }

  CoordinatorParts p_;
  ActiveJob* job_ = nullptr;
  std::vector<std::shared_ptr<WorkerChannel>> channels_;
};

TEST_F(HangWatchdogTest, NoProgressAsksTheRanksThenCallsTheJobHung) {
  p_.clock.Advance(std::chrono::seconds(10));
  EXPECT_FALSE(Look().hung);  // exactly the timeout: not yet
  int64_t request = 0;
  EXPECT_FALSE(Asked(0, &request));
  p_.clock.Advance(std::chrono::milliseconds(1));
  EXPECT_FALSE(Look().hung);  // asks
  ASSERT_TRUE(Asked(0, &request));
  ASSERT_TRUE(Asked(1, &request));
  EXPECT_FALSE(Look().hung);  // still answering
  FlightRecord r;
  r.rank = 0;
  p_.requests.AddFlightRecord(job_->record.id, 1, request, r);
  p_.clock.Advance(std::chrono::seconds(5));  // rank 1 never answers: the wait is over
  const HangVerdict v = Look();
  EXPECT_TRUE(v.hung);
  EXPECT_NE(v.failure.find("no step progress within step_timeout_s (10 s) at step 0: the job is hung"),
            std::string::npos)
      << v.failure;
}

TEST_F(HangWatchdogTest, ProgressWhileAskingCallsItOff) {
  p_.clock.Advance(std::chrono::seconds(11));
  Look();
  int64_t request = 0;
  ASSERT_TRUE(Asked(0, &request));
  job_->progress.Touch(p_.clock.SteadyNow());  // a step came
  EXPECT_FALSE(Look().hung);
  EXPECT_EQ(p_.requests.diagnosis(request), nullptr);  // the request is dropped
  EXPECT_EQ(job_->attempt->watch().hang_diagnosis, 0);
}

TEST_F(HangWatchdogTest, OnlyARunningJobCanBeDiagnosed) {
  auto id = RequestDiagnosis(*job_, p_.clock, &p_.requests, std::chrono::seconds(5));
  ASSERT_TRUE(id.ok());
  EXPECT_EQ(p_.requests.diagnosis(*id)->deadline, p_.clock.SteadyNow() + std::chrono::seconds(5));
  for (int rank = 0; rank < 2; ++rank) {
    FlightRecord r;
    r.rank = rank;
    p_.requests.AddFlightRecord(job_->record.id, 1, *id, r);
  }
  std::optional<Diagnosis> d = TakeDiagnosis(*id, p_.clock, &p_.requests);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->answers.size(), 2u);
  EXPECT_FALSE(TakeDiagnosis(*id, p_.clock, &p_.requests));  // taken
  ActiveJob& queued = p_.Submit("max_steps: 10\nnum_processes: 4\n");
  EXPECT_EQ(RequestDiagnosis(queued, p_.clock, &p_.requests, std::chrono::seconds(5)).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace trainyard
