// PendingRequests: checkpoint and diagnose requests under one numbering,
// answered once.
#include "server/jobs/pending_requests.h"

#include <gtest/gtest.h>

namespace trainyard {
namespace {

using std::chrono::seconds;
const PendingRequests::Time kT0{seconds(1000)};

TEST(PendingRequestsTest, ACheckpointAnswersItsRequestOnce) {
  PendingRequests r;
  const int64_t id = r.NextId();
  EXPECT_NE(r.NextId(), id);  // one numbering
  CheckpointEvent unasked;
  unasked.request_id = 0;  // a periodic one: nobody waits for it
  r.CheckpointReported(unasked);
  EXPECT_FALSE(r.has_checkpoint(0));
  CheckpointEvent c;
  c.request_id = id;
  c.index = 4;
  r.CheckpointReported(c);
  ASSERT_TRUE(r.has_checkpoint(id));
  EXPECT_EQ(r.TakeCheckpoint(id)->index, 4);
  EXPECT_FALSE(r.TakeCheckpoint(id));  // taken
}

TEST(PendingRequestsTest, ADiagnosisTakesAnswersOfItsAttemptOnly) {
  PendingRequests r;
  const int64_t id = r.StartDiagnosis("job-1", 2, 2, kT0 + seconds(5));
  FlightRecord f;
  f.rank = 0;
  EXPECT_FALSE(r.AddFlightRecord("job-1", 1, id, f));  // another attempt's
  EXPECT_FALSE(r.AddFlightRecord("job-2", 2, id, f));  // another job's
  EXPECT_TRUE(r.AddFlightRecord("job-1", 2, id, f));
  ASSERT_NE(r.diagnosis(id), nullptr);
  EXPECT_FALSE(r.diagnosis(id)->complete());
  f.rank = 1;
  EXPECT_TRUE(r.AddFlightRecord("job-1", 2, id, f));
  EXPECT_TRUE(r.diagnosis(id)->complete());
  EXPECT_EQ(r.TakeDiagnosis(id)->answers.size(), 2u);
  EXPECT_EQ(r.diagnosis(id), nullptr);
}

TEST(PendingRequestsTest, DiagnosesNobodyWaitsForExpireAMinuteAfterTheirDeadline) {
  PendingRequests r;
  const int64_t id = r.StartDiagnosis("job-1", 1, 1, kT0);
  r.ExpireDiagnoses(kT0 + seconds(59));
  EXPECT_NE(r.diagnosis(id), nullptr);
  r.ExpireDiagnoses(kT0 + seconds(61));
  EXPECT_EQ(r.diagnosis(id), nullptr);
}

}  // namespace
}  // namespace trainyard
