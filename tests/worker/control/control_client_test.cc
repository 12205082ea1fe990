// The worker's control stream against a stand-in WorkerService on loopback
// (a real gRPC server whose side of the conversation the test scripts):
// the hello, the welcome, commands reaching TrainerControl, metrics and
// checkpoint reports going up, and the final outcome.
#include "worker/control/control_client.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "common/credentials.h"
#include "common/leader_hint_grpc.h"
#include "common/wire_convert.h"
#include "tests/test_util.h"
#include "trainyard/v1/trainyard.grpc.pb.h"

namespace trainyard {
namespace {

class FakeWorkerService final : public v1::WorkerService::Service {
 public:
  grpc::Status Connect(grpc::ServerContext* ctx,
                       grpc::ServerReaderWriter<v1::CoordinatorMessage, v1::WorkerMessage>* stream) override {
    {
      std::lock_guard<std::mutex> lock(mu);
      const auto& md = ctx->client_metadata();
      for (auto [key, out] : {std::pair{kWorkerJobMetadata, &metadata_job}, {kWorkerTokenMetadata, &metadata_token}}) {
        auto it = md.find(key);
        *out = it == md.end() ? "" : std::string(it->second.data(), it->second.size());
      }
      // Strangers fill the hello budget for a while.
      if (refuse > 0) {
        --refuse;
        ++refused;
        return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                            "too many streams from this host have not said hello yet");
      }
    }
    v1::WorkerMessage msg;
    if (!stream->Read(&msg) || !msg.has_hello()) return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "no hello");
    {
      std::lock_guard<std::mutex> lock(mu);
      hello = msg.hello();
    }
    if (msg.hello().token() != "token-0123456789abcdef") {
      return grpc::Status(grpc::StatusCode::PERMISSION_DENIED, "bad token");
    }
    v1::CoordinatorMessage welcome;
    welcome.mutable_welcome()->set_spec_json(R"({"name":"t"})");
    welcome.mutable_welcome()->set_world_size(2);
    welcome.mutable_welcome()->set_attempt(3);
    welcome.mutable_welcome()->set_master_addr("10.1.2.3");
    welcome.mutable_welcome()->set_master_port(29555);
    stream->Write(welcome);
    v1::CoordinatorMessage ckpt;
    ckpt.mutable_checkpoint()->set_request_id(7);
    ckpt.mutable_checkpoint()->set_type(v1::SHARDED);
    ckpt.mutable_checkpoint()->set_stop_after(true);
    stream->Write(ckpt);
    v1::CoordinatorMessage stop;
    stop.mutable_stop()->set_reason("cancelled");
    stream->Write(stop);
    v1::CoordinatorMessage members;  // replica mode: who trains together
    members.mutable_membership()->set_epoch(2);
    members.mutable_membership()->add_ranks(0);
    members.mutable_membership()->add_ranks(1);
    members.mutable_membership()->set_store_addr("10.1.2.4");
    members.mutable_membership()->set_store_port(4100);
    members.mutable_membership()->set_reason("rank 2 lost");
    stream->Write(members);
    // Epoch 3 as a change from epoch 2 (rank 1 out, rank 2 in), then one
    // from an epoch the rank does not hold: it asks for the whole list.
    v1::CoordinatorMessage delta;
    ToProto(MembershipView{3, {}, "10.1.2.4", 4100, "rank 1 lost; rank 2 joined"},
            MembershipDelta{2, {1}, {2}, MembershipDigest({0, 2})}, delta.mutable_membership());
    stream->Write(delta);
    v1::CoordinatorMessage stale;
    ToProto(MembershipView{4, {}, "10.1.2.4", 4100, "rank 0 lost"}, MembershipDelta{2, {0}, {}, MembershipDigest({1})},
            stale.mutable_membership());
    stream->Write(stale);
    while (stream->Read(&msg)) {
      std::lock_guard<std::mutex> lock(mu);
      if (msg.has_metrics()) {
        for (const auto& s : msg.metrics().samples()) steps.push_back(s.step());
      } else if (msg.has_checkpoint()) {
        checkpoints.push_back(msg.checkpoint());
      } else if (msg.has_replica()) {
        replicas.push_back(msg.replica());
      } else if (msg.has_result()) {
        result = msg.result();
        got_result = true;
        cv.notify_all();
        break;  // the coordinator closes the stream after the result
      }
    }
    return grpc::Status::OK;
  }

  std::mutex mu;
  std::condition_variable cv;
  int refuse = 0, refused = 0;  // streams to refuse with RESOURCE_EXHAUSTED; refused so far
  std::string metadata_job, metadata_token;
  v1::WorkerHello hello;
  std::vector<int64_t> steps;
  std::vector<v1::Checkpoint> checkpoints;
  std::vector<v1::ReplicaReport> replicas;
  v1::WorkerResult result;
  bool got_result = false;
};

class ControlClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(port_, 0);
    options_.server = "127.0.0.1:" + std::to_string(port_);
    options_.job_id = "job-9";
    options_.rank = 1;
    options_.attempt = 3;
    options_.token = "token-0123456789abcdef";
    options_.metrics_every_steps = 2;
    options_.connect_timeout = std::chrono::seconds(5);
    options_.reconnect_timeout = std::chrono::seconds(1);
  }
  void TearDown() override { server_->Shutdown(); }

  FakeWorkerService service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  ControlOptions options_;
};

TEST_F(ControlClientTest, AConversationFromHelloToResult) {
  TrainerControl control;
  auto client = ControlClient::Connect(options_, &control);
  ASSERT_TRUE(client.ok()) << client.status();
  {
    std::lock_guard<std::mutex> lock(service_.mu);
    EXPECT_EQ(service_.hello.job_id(), "job-9");
    EXPECT_EQ(service_.hello.rank(), 1);
    EXPECT_EQ(service_.hello.attempt(), 3);
  }
  const Welcome& w = (*client)->welcome();
  EXPECT_EQ(w.spec_json, R"({"name":"t"})");
  EXPECT_EQ(w.world_size, 2);
  EXPECT_EQ(w.attempt, 3);
  EXPECT_EQ(w.master_addr, "10.1.2.3");
  EXPECT_EQ(w.master_port, 29555);

  // The commands sent after the welcome reach the trainer's control.
  std::optional<CheckpointRequest> request;
  ASSERT_TRUE(WaitFor(
      [&] {
        if (!request) request = control.TakeCheckpoint();
        return request.has_value() && control.stop_requested();
      },
      std::chrono::seconds(5)));
  ASSERT_TRUE(request.has_value());
  EXPECT_EQ(request->type, CheckpointType::kSharded);
  EXPECT_EQ(request->request_id, 7);
  EXPECT_TRUE(request->stop_after);
  EXPECT_TRUE(control.stop_requested());

  for (int64_t step = 1; step <= 5; ++step) {
    StepMetrics m;
    m.rank = 1;
    m.step = step;
    (*client)->OnStep(m);
  }
  CheckpointEvent e;
  e.index = 2;
  e.step = 5;
  e.type = CheckpointType::kSharded;
  e.ok = true;
  (*client)->OnCheckpoint(e);
  (*client)->Finish(WorkerOutcome::kStopped, "stopped on request after step 5", 5);

  std::unique_lock<std::mutex> lock(service_.mu);
  ASSERT_TRUE(service_.cv.wait_for(lock, std::chrono::seconds(10), [&] { return service_.got_result; }));
  // Every step's metrics went up, in order, before the result.
  EXPECT_EQ(service_.steps, (std::vector<int64_t>{1, 2, 3, 4, 5}));
  ASSERT_EQ(service_.checkpoints.size(), 1u);
  EXPECT_EQ(service_.checkpoints[0].type(), v1::SHARDED);
  EXPECT_EQ(service_.checkpoints[0].index(), 2);
  EXPECT_EQ(service_.result.outcome(), v1::WORKER_OUTCOME_STOPPED);
  EXPECT_EQ(service_.result.error(), "stopped on request after step 5");
  EXPECT_EQ(service_.result.final_step(), 5);
}

// Replica mode: the rank's store port in the hello, memberships down into
// the rank's mailbox, the rank's reports up.
TEST_F(ControlClientTest, MembershipsComeDownReplicaReportsGoUp) {
  options_.advertise_addr = "10.1.2.5";
  options_.replica_store_port = 4101;
  TrainerControl control;
  MembershipMailbox memberships;
  options_.memberships = &memberships;
  auto client = ControlClient::Connect(options_, &control);
  ASSERT_TRUE(client.ok()) << client.status();
  {
    std::lock_guard<std::mutex> lock(service_.mu);
    EXPECT_EQ(service_.hello.replica_store_port(), 4101);
    EXPECT_EQ(service_.hello.advertise_addr(), "10.1.2.5");
  }
  // Epoch 2 came whole, epoch 3 as a change from it: the rank holds the
  // ranks the delta makes of epoch 2's.
  std::optional<MembershipView> m =
      memberships.WaitNewer(2, std::chrono::steady_clock::now() + std::chrono::seconds(5));
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->epoch, 3);
  EXPECT_EQ(m->ranks, (std::vector<int32_t>{0, 2}));
  EXPECT_EQ(m->store_addr, "10.1.2.4");
  EXPECT_EQ(m->store_port, 4100);
  EXPECT_EQ(m->reason, "rank 1 lost; rank 2 joined");
  ReplicaReport broken{ReplicaReport::Kind::kGroupBroken, 1, 7, "Connection closed by peer"};
  (*client)->OnReplica(broken);
  ReplicaReport committed{ReplicaReport::Kind::kCommitted, 2, 8};
  committed.seconds = 0.5;
  committed.healed = true;
  committed.heal_bytes = 1234;
  (*client)->OnReplica(committed);
  (*client)->Finish(WorkerOutcome::kSucceeded, "", 8);

  std::unique_lock<std::mutex> lock(service_.mu);
  ASSERT_TRUE(service_.cv.wait_for(lock, std::chrono::seconds(10), [&] { return service_.got_result; }));
  // The delta that did not apply: a report of the epoch held, to get it whole.
  std::vector<v1::ReplicaReport> asked;
  std::erase_if(service_.replicas, [&](const v1::ReplicaReport& r) {
    if (r.detail() != "a membership delta did not apply") return false;
    asked.push_back(r);
    return true;
  });
  ASSERT_EQ(asked.size(), 1u);
  EXPECT_EQ(asked[0].kind(), v1::ReplicaReport::GROUP_BROKEN);
  EXPECT_EQ(asked[0].epoch(), 3);
  EXPECT_EQ(memberships.WaitNewer(3, std::chrono::steady_clock::now()), std::nullopt) << "epoch 4 was not taken";
  ASSERT_EQ(service_.replicas.size(), 2u);
  EXPECT_EQ(service_.replicas[0].kind(), v1::ReplicaReport::GROUP_BROKEN);
  EXPECT_EQ(service_.replicas[0].epoch(), 1);
  EXPECT_EQ(service_.replicas[0].step(), 7);
  EXPECT_EQ(service_.replicas[0].detail(), "Connection closed by peer");
  EXPECT_EQ(service_.replicas[1].kind(), v1::ReplicaReport::COMMITTED);
  EXPECT_EQ(service_.replicas[1].epoch(), 2);
  EXPECT_EQ(service_.replicas[1].step(), 8);
  EXPECT_DOUBLE_EQ(service_.replicas[1].seconds(), 0.5);
  EXPECT_TRUE(service_.replicas[1].healed());
  EXPECT_EQ(service_.replicas[1].heal_bytes(), 1234);
}

// Refused for now (RESOURCE_EXHAUSTED: strangers hold the hello budget), a
// launched worker asks again by the join rule and is in once taken; its
// stream names its job and token in the metadata from the start.
TEST_F(ControlClientTest, AWorkerRefusedForNowAsksAgainUntilTaken) {
  service_.refuse = 3;
  TrainerControl control;
  auto client = ControlClient::Connect(options_, &control);
  ASSERT_TRUE(client.ok()) << client.status();
  {
    std::lock_guard<std::mutex> lock(service_.mu);
    EXPECT_EQ(service_.refused, 3);
    EXPECT_EQ(service_.metadata_job, "job-9");
    EXPECT_EQ(service_.metadata_token, "token-0123456789abcdef");
  }
  EXPECT_EQ((*client)->welcome().attempt, 3);
  (*client)->Finish(WorkerOutcome::kStopped, "stopped", 0);
}

// ... until its join timeout.
TEST_F(ControlClientTest, AWorkerRefusedPastItsJoinTimeoutGivesUp) {
  service_.refuse = 1000;
  options_.join_timeout = std::chrono::milliseconds(1500);
  TrainerControl control;
  const auto t0 = std::chrono::steady_clock::now();
  auto client = ControlClient::Connect(options_, &control);
  ASSERT_FALSE(client.ok());
  EXPECT_EQ(client.status().code(), absl::StatusCode::kResourceExhausted) << client.status();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  std::lock_guard<std::mutex> lock(service_.mu);
  EXPECT_GE(service_.refused, 3);
}

TEST_F(ControlClientTest, ARefusedHelloIsTheCoordinatorsError) {
  options_.token = "wrong-token-0000000000";
  TrainerControl control;
  auto client = ControlClient::Connect(options_, &control);
  ASSERT_FALSE(client.ok());
  EXPECT_NE(std::string(client.status().message()).find("bad token"), std::string::npos) << client.status();
}

// High availability (issue 65): a coordinator that leads or stands by. A
// standby answers UNAVAILABLE naming `hint`; a leader takes the hello,
// writes the welcome and `commands` (each with its own term), and keeps the
// stream until it steps down (then answers as a standby naming `hint`) or
// the worker goes.
class HaWorkerService final : public v1::WorkerService::Service {
 public:
  grpc::Status Connect(grpc::ServerContext* ctx,
                       grpc::ServerReaderWriter<v1::CoordinatorMessage, v1::WorkerMessage>* stream) override {
    std::unique_lock<std::mutex> lock(mu);
    if (!leading) {
      ++standby_answers;
      return AnswerAsStandby(ctx, hint, term);
    }
    lock.unlock();
    v1::WorkerMessage hello;
    if (!stream->Read(&hello) || !hello.has_hello())
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "no hello");
    lock.lock();
    ++hellos;
    cv.notify_all();
    v1::CoordinatorMessage welcome;
    welcome.mutable_welcome()->set_world_size(2);
    welcome.mutable_welcome()->set_attempt(3);
    welcome.set_term(term);
    const std::vector<v1::CoordinatorMessage> to_send = commands;
    lock.unlock();
    stream->Write(welcome);
    for (const auto& c : to_send) stream->Write(c);
    lock.lock();
    // gRPC's synchronous API tells a cancelled call by asking.
    while (!step_down && !ctx->IsCancelled()) cv.wait_for(lock, std::chrono::milliseconds(20));
    if (step_down) return AnswerAsStandby(ctx, hint, term);
    return grpc::Status::OK;
  }

  std::mutex mu;
  std::condition_variable cv;
  bool leading = false;
  bool step_down = false;  // the leader's stream ends as a standby's answer
  std::string hint;        // the leader a standby names
  int64_t term = 0;
  std::vector<v1::CoordinatorMessage> commands;
  int hellos = 0, standby_answers = 0;
};

struct RunningCoordinator {
  RunningCoordinator() {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&service);
    server = builder.BuildAndStart();
    address = "127.0.0.1:" + std::to_string(port);
  }
  ~RunningCoordinator() { server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1)); }
  HaWorkerService service;
  std::unique_ptr<grpc::Server> server;
  std::string address;
};

v1::CoordinatorMessage CheckpointOfTerm(int64_t request_id, int64_t term) {
  v1::CoordinatorMessage m;
  m.mutable_checkpoint()->set_request_id(request_id);
  m.set_term(term);
  return m;
}

// Fencing: the worker obeys no command of a term lower than the highest it
// has seen (the welcome's included); a higher one raises it.
TEST_F(ControlClientTest, ACommandOfALowerTermIsIgnored) {
  RunningCoordinator leader;
  {
    std::lock_guard<std::mutex> lock(leader.service.mu);
    leader.service.leading = true;
    leader.service.term = 5;
    v1::CoordinatorMessage stale_stop;
    stale_stop.mutable_stop()->set_reason("from a replaced leader");
    stale_stop.set_term(3);
    leader.service.commands = {CheckpointOfTerm(1, 4), stale_stop,
                               CheckpointOfTerm(2, 5), CheckpointOfTerm(3, 6),
                               CheckpointOfTerm(4, 5), CheckpointOfTerm(5, 6)};
  }
  options_.server = leader.address;
  TrainerControl control;
  auto client = ControlClient::Connect(options_, &control);
  ASSERT_TRUE(client.ok()) << client.status();
  // The commands are handled in order: once the last is in, all are.
  std::vector<int64_t> obeyed;
  ASSERT_TRUE(WaitFor(
      [&] {
        while (std::optional<CheckpointRequest> r = control.TakeCheckpoint()) obeyed.push_back(r->request_id);
        return !obeyed.empty() && obeyed.back() == 5;
      },
      std::chrono::seconds(5)));
  EXPECT_EQ(obeyed, (std::vector<int64_t>{2, 3, 5}));
  EXPECT_FALSE(control.stop_requested());
}

// A standby's hint leads the worker to the leader, even one not in its list.
TEST_F(ControlClientTest, AStandbysHintLeadsTheWorkerToTheLeader) {
  RunningCoordinator standby;
  standby.service.hint = options_.server;  // the stand-in coordinator of the fixture
  options_.server = standby.address;
  options_.join_timeout = std::chrono::seconds(5);
  TrainerControl control;
  auto client = ControlClient::Connect(options_, &control);
  ASSERT_TRUE(client.ok()) << client.status();
  EXPECT_EQ((*client)->welcome().attempt, 3);
  {
    std::lock_guard<std::mutex> lock(service_.mu);
    EXPECT_EQ(service_.hello.job_id(), "job-9");
  }
  std::lock_guard<std::mutex> lock(standby.service.mu);
  EXPECT_EQ(standby.service.standby_answers, 1);
}

// A takeover: the leader steps down naming the other coordinator, which
// now leads with the next term; the worker reattaches there at once and
// obeys its commands.
TEST_F(ControlClientTest, AfterATakeoverTheWorkerReattachesToTheNewLeader) {
  RunningCoordinator a, b;
  {
    std::lock_guard<std::mutex> lock(a.service.mu);
    a.service.leading = true;
    a.service.term = 1;
  }
  {
    std::lock_guard<std::mutex> lock(b.service.mu);
    b.service.hint = a.address;
    b.service.term = 1;
  }
  options_.server = a.address + "," + b.address;
  options_.reconnect_timeout = std::chrono::seconds(20);
  TrainerControl control;
  auto client = ControlClient::Connect(options_, &control);
  ASSERT_TRUE(client.ok()) << client.status();
  {
    std::lock_guard<std::mutex> lock(b.service.mu);
    EXPECT_EQ(b.service.hellos, 0);
    b.service.leading = true;
    b.service.term = 2;
    b.service.commands = {CheckpointOfTerm(7, 2)};
  }
  const auto takeover = std::chrono::steady_clock::now();
  {
    std::lock_guard<std::mutex> lock(a.service.mu);
    a.service.leading = false;
    a.service.step_down = true;
    a.service.hint = b.address;
    a.service.term = 2;
    a.service.cv.notify_all();
  }
  std::optional<CheckpointRequest> r;
  ASSERT_TRUE(WaitFor(
      [&] {
        if (!r) r = control.TakeCheckpoint();
        return r.has_value();
      },
      std::chrono::seconds(10)));
  EXPECT_EQ(r->request_id, 7);
  EXPECT_LT(std::chrono::steady_clock::now() - takeover, std::chrono::seconds(2));
  {
    std::lock_guard<std::mutex> lock(b.service.mu);
    EXPECT_EQ(b.service.hellos, 1);
  }
  {
    std::lock_guard<std::mutex> lock(a.service.mu);
    EXPECT_EQ(a.service.hellos, 1);  // the first stream only: then it stood by
  }
  EXPECT_FALSE(control.stop_requested());
}

// A list with an empty item is refused, naming it.
TEST_F(ControlClientTest, AServerListWithAnEmptyItemIsRefused) {
  options_.server = options_.server + ",,127.0.0.1:1";
  TrainerControl control;
  auto client = ControlClient::Connect(options_, &control);
  ASSERT_FALSE(client.ok());
  EXPECT_EQ(client.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(client.status().message()).find("item 2 is empty"), std::string::npos) << client.status();
}

}  // namespace
}  // namespace trainyard
