// JobService over a real gRPC server on loopback, a real SQLite store and a
// JobManager: ListJobs pages (AIP-158) so that a default client (4 MB
// messages) lists any number of jobs, its views (AIP-157), and the
// arguments it refuses. WorkerService for a replica job: memberships down
// the streams, replica reports up, and GetJob's replicas.
#include "server/api/rpc_services.h"

#include "server/jobs/job_manager.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <deque>
#include <functional>
#include <optional>
#include <set>

#include "common/credentials.h"
#include "server/store/job_store.h"
#include "tests/server/coordinator_parts.h"
#include "tests/test_util.h"

namespace trainyard {
namespace {

class NullLauncher final : public Launcher {
 public:
  absl::Status Launch(const LaunchRequest&) override { return absl::UnavailableError("not in this test"); }
  void Stop(const std::string&, int32_t) override {}
  int LiveProcesses(const std::string&) override { return 0; }
  void Adopt(const LaunchRequest&) override {}
};

class ListJobsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto store = JobStore::Open(dir_.path() + "/jobs.db");
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
  }
  void Start() {
    JobManagerOptions o;
    o.state_dir = dir_.path();
    o.coordinator_addr = "127.0.0.1:1";
    manager_ = std::make_unique<JobManager>(store_.get(), &launcher_, &metrics_, o);
    ASSERT_TRUE(manager_->Recover().ok());
    service_ = std::make_unique<JobServiceImpl>(manager_.get());
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(port, 0);
    stub_ = v1::JobService::NewStub(
        grpc::CreateChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials()));
  }
  void TearDown() override {
    if (server_) server_->Shutdown();
  }
  // Ended jobs with specs of about 2 KB, as the store holds them.
  void Insert(int first, int count, JobState state) {
    const std::string padding(2000, 'x');
    for (int i = first; i < first + count; ++i) {
      JobRecord r;
      r.id = "job-" + std::to_string(100000 + i);
      r.name = "n";
      r.state = state;
      r.spec_json = R"({"name":"n","note":")" + padding + R"("})";
      r.created_unix_millis = 1000 + i;
      ASSERT_TRUE(store_->Insert(r, {r.created_unix_millis, state, "test"}).ok());
    }
  }
  grpc::Status List(v1::ListJobsRequest req, v1::ListJobsResponse* resp) {
    grpc::ClientContext ctx;
    return stub_->ListJobs(&ctx, req, resp);
  }

  TempDir dir_;
  NullLauncher launcher_;
  ServerMetrics metrics_{std::make_shared<prometheus::Registry>()};
  std::unique_ptr<JobStore> store_;
  std::unique_ptr<JobManager> manager_;
  std::unique_ptr<JobServiceImpl> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::JobService::Stub> stub_;
};

// 3000 jobs with their specs are ~6 MB: more than one message a default
// client accepts. Pages of at most 1000 carry them all, each once, in order.
TEST_F(ListJobsTest, PagesCarryEveryJobOnceUnderTheMessageLimit) {
  Insert(0, 3000, JobState::kSucceeded);
  Start();
  v1::ListJobsRequest req;
  req.set_page_size(100000);  // capped by the server
  req.set_view(v1::JOB_VIEW_FULL);
  std::vector<std::string> ids;
  int pages = 0;
  do {
    v1::ListJobsResponse resp;
    grpc::Status st = List(req, &resp);
    ASSERT_TRUE(st.ok()) << st.error_message();
    ASSERT_LE(resp.jobs_size(), 1000);
    EXPECT_LT(resp.ByteSizeLong(), 4u << 20);
    for (const v1::Job& j : resp.jobs()) {
      EXPECT_GT(j.spec_json().size(), 2000u);
      ids.push_back(j.id());
    }
    req.set_page_token(resp.next_page_token());
    ++pages;
  } while (!req.page_token().empty());
  EXPECT_EQ(pages, 3);
  ASSERT_EQ(ids.size(), 3000u);
  for (int i = 0; i < 3000; ++i) ASSERT_EQ(ids[i], "job-" + std::to_string(100000 + i));

  // The basic view (the default) leaves the spec out.
  v1::ListJobsRequest basic;
  v1::ListJobsResponse resp;
  ASSERT_TRUE(List(basic, &resp).ok());
  ASSERT_EQ(resp.jobs_size(), 100);  // the default page size
  EXPECT_TRUE(resp.jobs(0).spec_json().empty());
  EXPECT_FALSE(resp.next_page_token().empty());
}

// A token names the last job of its page: jobs added meanwhile are neither
// skipped nor repeated, and the state filter applies on every page.
TEST_F(ListJobsTest, ATokenSurvivesNewJobsAndKeepsTheFilter) {
  Insert(0, 10, JobState::kSucceeded);
  Insert(10, 10, JobState::kFailed);
  Insert(20, 10, JobState::kSucceeded);
  Start();
  v1::ListJobsRequest req;
  req.add_states(v1::SUCCEEDED);
  req.set_page_size(15);
  v1::ListJobsResponse first;
  ASSERT_TRUE(List(req, &first).ok());
  ASSERT_EQ(first.jobs_size(), 15);
  Insert(30, 5, JobState::kSucceeded);
  Insert(35, 5, JobState::kFailed);
  req.set_page_token(first.next_page_token());
  v1::ListJobsResponse second;
  ASSERT_TRUE(List(req, &second).ok());
  EXPECT_TRUE(second.next_page_token().empty());
  std::set<std::string> seen;
  for (const auto* page : {&first, &second}) {
    for (const v1::Job& j : page->jobs()) {
      EXPECT_EQ(j.state(), v1::SUCCEEDED);
      EXPECT_TRUE(seen.insert(j.id()).second) << j.id() << " twice";
    }
  }
  EXPECT_EQ(seen.size(), 25u);  // 10 + 10 + the 5 added between the pages
}

TEST_F(ListJobsTest, BadArgumentsNameTheirField) {
  Start();
  const std::pair<std::function<void(v1::ListJobsRequest*)>, std::string> cases[] = {
      {[](v1::ListJobsRequest* r) { r->set_page_size(-1); }, "field 'page_size'"},
      {[](v1::ListJobsRequest* r) { r->set_page_token("offset=5"); }, "field 'page_token'"},
      {[](v1::ListJobsRequest* r) { r->set_page_token("jobs-after-x"); }, "field 'page_token'"},
      {[](v1::ListJobsRequest* r) { r->add_states(static_cast<v1::JobState>(99)); }, "field 'states'"},
      {[](v1::ListJobsRequest* r) { r->set_view(static_cast<v1::JobView>(7)); }, "field 'view'"},
  };
  for (const auto& [mutate, field] : cases) {
    v1::ListJobsRequest req;
    mutate(&req);
    v1::ListJobsResponse resp;
    grpc::Status st = List(req, &resp);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << field;
    EXPECT_NE(st.error_message().find(field), std::string::npos) << st.error_message();
  }
}

}  // namespace
}  // namespace trainyard

namespace trainyard {
namespace {

// WorkerService and JobService over a real gRPC server for a replica job
// (fault_tolerance.mode replica): stand-in workers speak the protocol on
// their streams; the launcher records what it is asked.
class ReplicaStreamsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto store = JobStore::Open(dir_.path() + "/jobs.db");
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
    JobManagerOptions o;
    o.slots = 4;
    o.state_dir = dir_.path();
    o.coordinator_addr = "127.0.0.1:1";
    manager_ = std::make_unique<JobManager>(store_.get(), &launcher_, &metrics_, o);
    ASSERT_TRUE(manager_->Recover().ok());
    jobs_ = std::make_unique<JobServiceImpl>(manager_.get());
    workers_ = std::make_unique<WorkerServiceImpl>(&manager_->workers());
    workers_->set_term_source([this] { return term_.load(); });
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(jobs_.get());
    builder.RegisterService(workers_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(port, 0);
    auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials());
    job_stub_ = v1::JobService::NewStub(channel);
    worker_stub_ = v1::WorkerService::NewStub(channel);
  }
  void TearDown() override {
    for (auto& w : streams_) {
      w.stream->WritesDone();
      w.ctx->TryCancel();
    }
    streams_.clear();
    if (server_) server_->Shutdown();
  }

  struct Worker {
    std::unique_ptr<grpc::ClientContext> ctx;
    std::unique_ptr<grpc::ClientReaderWriter<v1::WorkerMessage, v1::CoordinatorMessage>> stream;
    int64_t welcome_term = -1;
  };
  // Rank `rank` connects with its hello (its store at 127.0.0.1:<29500 + rank>)
  // and reads its welcome.
  Worker* Connect(const JobRecord& job, int32_t rank) {
    Worker w;
    w.ctx = std::make_unique<grpc::ClientContext>();
    w.stream = worker_stub_->Connect(w.ctx.get());
    v1::WorkerMessage hello;
    hello.mutable_hello()->set_job_id(job.id);
    hello.mutable_hello()->set_rank(rank);
    hello.mutable_hello()->set_attempt(job.attempt);
    hello.mutable_hello()->set_token(job.worker_token);
    hello.mutable_hello()->set_advertise_addr("127.0.0.1");
    hello.mutable_hello()->set_replica_store_port(29500 + rank);
    EXPECT_TRUE(w.stream->Write(hello));
    v1::CoordinatorMessage welcome;
    EXPECT_TRUE(w.stream->Read(&welcome));
    EXPECT_TRUE(welcome.has_welcome());
    w.welcome_term = welcome.term();
    streams_.push_back(std::move(w));
    return &streams_.back();
  }
  // The next message down `w`'s stream, which must be a membership.
  static v1::Membership NextMembership(Worker* w) {
    v1::CoordinatorMessage down;
    EXPECT_TRUE(w->stream->Read(&down));
    EXPECT_TRUE(down.has_membership()) << down.DebugString();
    return down.membership();
  }
  v1::Job Get(const std::string& id) {
    grpc::ClientContext ctx;
    v1::GetJobRequest req;
    req.set_id(id);
    v1::GetJobResponse resp;
    EXPECT_TRUE(job_stub_->GetJob(&ctx, req, &resp).ok());
    return resp.job();
  }

  TempDir dir_;
  RecordingLauncher launcher_;
  ServerMetrics metrics_{std::make_shared<prometheus::Registry>()};
  std::unique_ptr<JobStore> store_;
  std::unique_ptr<JobManager> manager_;
  std::unique_ptr<JobServiceImpl> jobs_;
  std::unique_ptr<WorkerServiceImpl> workers_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::JobService::Stub> job_stub_;
  std::unique_ptr<v1::WorkerService::Stub> worker_stub_;
  std::deque<Worker> streams_;
  std::atomic<int64_t> term_{0};  // the term source's (issue 65's fencing token)
};

// The welcome and every command carry the term of the coordinator's
// leadership as it is when written (0 without leadership).
TEST_F(ReplicaStreamsTest, EveryMessageDownCarriesTheLeadersTerm) {
  auto submitted = manager_->Submit(
      "max_steps: 10\nnum_processes: 2\ndistributed_type: DDP\nfault_tolerance: {mode: replica, min_replicas: 1}\n");
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  const JobRecord job = *manager_->Get(submitted->id);
  Worker* w0 = Connect(job, 0);
  EXPECT_EQ(w0->welcome_term, 0);
  term_ = 7;
  Worker* w1 = Connect(job, 1);
  EXPECT_EQ(w1->welcome_term, 7);
  v1::CoordinatorMessage down;
  ASSERT_TRUE(w0->stream->Read(&down));
  EXPECT_TRUE(down.has_membership()) << down.DebugString();
  EXPECT_EQ(down.term(), 7);
  term_ = 8;
  manager_->workers().OnRankExit(RankExit::Killed(job.id, job.attempt, 1, 9));
  ASSERT_TRUE(w0->stream->Read(&down));
  EXPECT_EQ(down.membership().epoch(), 2);
  EXPECT_EQ(down.term(), 8);
}

TEST_F(ReplicaStreamsTest, MembershipsGoDownTheStreamsAndReportsComeUp) {
  auto submitted = manager_->Submit(
      "max_steps: 10\nnum_processes: 2\ndistributed_type: DDP\nfault_tolerance: {mode: replica, min_replicas: 1}\n");
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  const JobRecord job = *manager_->Get(submitted->id);
  Worker* w0 = Connect(job, 0);
  Worker* w1 = Connect(job, 1);
  for (Worker* w : {w0, w1}) {
    const v1::Membership m = NextMembership(w);
    EXPECT_EQ(m.epoch(), 1);
    EXPECT_EQ(std::vector<int32_t>(m.ranks().begin(), m.ranks().end()), (std::vector<int32_t>{0, 1}));
    EXPECT_EQ(m.store_addr(), "127.0.0.1");
    EXPECT_EQ(m.store_port(), 29500);
    EXPECT_EQ(m.reason(), "all 2 ranks connected");
  }
  v1::Job got = Get(job.id);
  ASSERT_TRUE(got.has_replicas());
  EXPECT_EQ(got.replicas().epoch(), 1);
  EXPECT_EQ(got.replicas().live_size(), 2);
  EXPECT_EQ(got.replicas().min_replicas(), 1);

  // Rank 1 dies: rank 0 trains on alone, rank 1 is started again.
  manager_->workers().OnRankExit(RankExit::Killed(job.id, job.attempt, 1, 9));
  EXPECT_EQ(NextMembership(w0).epoch(), 2);
  got = Get(job.id);
  EXPECT_EQ(got.state(), v1::RUNNING);
  EXPECT_EQ(std::vector<int32_t>(got.replicas().live().begin(), got.replicas().live().end()),
            (std::vector<int32_t>{0}));
  EXPECT_EQ(std::vector<int32_t>(got.replicas().healing().begin(), got.replicas().healing().end()),
            (std::vector<int32_t>{1}));
  ASSERT_EQ(launcher_.relaunched().size(), 1u);

  // Its replacement connects, both take membership 3, and its commit heals it.
  Worker* r1 = Connect(job, 1);
  for (Worker* w : {w0, r1}) EXPECT_EQ(NextMembership(w).epoch(), 3);
  v1::WorkerMessage up;
  up.mutable_replica()->set_kind(v1::ReplicaReport::COMMITTED);
  up.mutable_replica()->set_epoch(3);
  up.mutable_replica()->set_step(4);
  up.mutable_replica()->set_healed(true);
  up.mutable_replica()->set_heal_bytes(2500000);
  ASSERT_TRUE(r1->stream->Write(up));
  ASSERT_TRUE(WaitFor(
      [&] {
        const v1::Job now = Get(job.id);
        for (const v1::JobEvent& e : now.events()) {
          if (e.reason().find("rank 1 healed in ") == 0) return true;
        }
        return false;
      },
      std::chrono::seconds(10)));
  got = Get(job.id);
  EXPECT_EQ(got.replicas().live_size(), 2);
  EXPECT_EQ(got.replicas().healing_size(), 0);
}

}  // namespace
}  // namespace trainyard

namespace trainyard {
namespace {

// WorkerService before the hello, on a server that listens on loopback TCP
// and on a Unix socket (two "hosts"): whose budget of streams waiting to
// say hello a stream takes, and what a hello may carry.
class HelloTest : public ::testing::Test {
 protected:
  static constexpr int kPerHost = 4, kAllHosts = 6, kPerJob = 4;

  void SetUp() override {
    auto store = JobStore::Open(dir_.path() + "/jobs.db");
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
    JobManagerOptions o;
    o.slots = 4;
    o.state_dir = dir_.path();
    o.coordinator_addr = "127.0.0.1:1";
    manager_ = std::make_unique<JobManager>(store_.get(), &launcher_, &metrics_, o);
    ASSERT_TRUE(manager_->Recover().ok());
    workers_ = std::make_unique<WorkerServiceImpl>(&manager_->workers(),
                                                   HelloLimits{kPerHost, kAllHosts, kPerJob, std::chrono::seconds(30)});
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.AddListeningPort("unix:" + dir_.path() + "/workers.sock", grpc::InsecureServerCredentials());
    builder.RegisterService(workers_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(port, 0);
    tcp_ = v1::WorkerService::NewStub(
        grpc::CreateChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials()));
    unix_ = v1::WorkerService::NewStub(
        grpc::CreateChannel("unix:" + dir_.path() + "/workers.sock", grpc::InsecureChannelCredentials()));
    auto submitted = manager_->Submit("max_steps: 10\nnum_processes: 2\n");
    ASSERT_TRUE(submitted.ok()) << submitted.status();
    job_ = *manager_->Get(submitted->id);
    ASSERT_FALSE(job_.worker_token.empty());
  }
  void TearDown() override {
    for (auto& s : streams_) s.ctx->TryCancel();
    streams_.clear();
    if (server_) server_->Shutdown();
  }

  struct Stream {
    std::unique_ptr<grpc::ClientContext> ctx;
    std::unique_ptr<grpc::ClientReaderWriter<v1::WorkerMessage, v1::CoordinatorMessage>> rw;
  };
  // A stream opened on `stub` that says nothing (yet); with the job's id
  // and `token` in its metadata, as a worker's, when given.
  Stream* Open(v1::WorkerService::Stub* stub, const std::optional<std::string>& token = std::nullopt) {
    Stream s;
    s.ctx = std::make_unique<grpc::ClientContext>();
    if (token) AddWorkerCredentials(s.ctx.get(), job_.id, *token);
    s.rw = stub->Connect(s.ctx.get());
    streams_.push_back(std::move(s));
    return &streams_.back();
  }
  // Opens `n` silent streams on `stub` and waits until the server counts them.
  void Silent(v1::WorkerService::Stub* stub, int n) {
    const int before = workers_->waiting_for_hello();
    for (int i = 0; i < n; ++i) Open(stub);
    ASSERT_TRUE(WaitFor([&] { return workers_->waiting_for_hello() == before + n; }, std::chrono::seconds(10)))
        << workers_->waiting_for_hello();
  }
  // How the server ends a stream that has not said hello (it must end it).
  static grpc::Status Refusal(Stream* s) {
    v1::CoordinatorMessage down;
    EXPECT_FALSE(s->rw->Read(&down)) << down.DebugString();
    return s->rw->Finish();
  }
  // Says `hello` on `s` and reads the answer: a welcome (OK) or the refusal.
  static grpc::Status Hello(Stream* s, const v1::WorkerHello& hello) {
    v1::WorkerMessage up;
    *up.mutable_hello() = hello;
    s->rw->Write(up);
    v1::CoordinatorMessage down;
    if (s->rw->Read(&down)) return down.has_welcome() ? grpc::Status::OK : grpc::Status(grpc::StatusCode::UNKNOWN, "");
    return s->rw->Finish();
  }
  v1::WorkerHello RankHello(int32_t rank) const {
    v1::WorkerHello h;
    h.set_job_id(job_.id);
    h.set_rank(rank);
    h.set_attempt(job_.attempt);
    h.set_token(job_.worker_token);
    h.set_node("node-1");
    return h;
  }

  TempDir dir_;
  RecordingLauncher launcher_;
  ServerMetrics metrics_{std::make_shared<prometheus::Registry>()};
  std::unique_ptr<JobStore> store_;
  std::unique_ptr<JobManager> manager_;
  std::unique_ptr<WorkerServiceImpl> workers_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::WorkerService::Stub> tcp_, unix_;
  JobRecord job_;
  std::deque<Stream> streams_;
};

// A stranger's silent streams fill its host's budget; the job's ranks, on
// the same host, are admitted all the same: they prove their job when they
// open, and take the job's budget, which the stranger cannot use.
TEST_F(HelloTest, SilentStreamsOfAStrangerDoNotKeepAJobsRanksOut) {
  Silent(tcp_.get(), kPerHost);
  grpc::Status refused = Refusal(Open(tcp_.get()));
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(refused.error_message().find("from this host"), std::string::npos) << refused.error_message();
  // A wrong token in the metadata proves nothing: the host's budget again.
  EXPECT_EQ(Refusal(Open(tcp_.get(), "0123456789abcdef0123456789abcdef")).error_code(),
            grpc::StatusCode::RESOURCE_EXHAUSTED);
  for (int32_t rank : {0, 1}) {
    grpc::Status s = Hello(Open(tcp_.get(), job_.worker_token), RankHello(rank));
    EXPECT_TRUE(s.ok()) << rank << ": " << s.error_message();
  }
  EXPECT_EQ(manager_->Get(job_.id)->state, JobState::kRunning);
}

// 127.0.0.2, .3, ... get no budget of their own beyond the bound of all
// hosts together (here: TCP loopback and the Unix socket).
TEST_F(HelloTest, AllHostsTogetherHaveOneBudget) {
  Silent(tcp_.get(), kPerHost);
  Silent(unix_.get(), kAllHosts - kPerHost);
  grpc::Status refused = Refusal(Open(unix_.get()));
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(refused.error_message().find("from all hosts"), std::string::npos) << refused.error_message();
  // A job's ranks still come in.
  EXPECT_TRUE(Hello(Open(unix_.get(), job_.worker_token), RankHello(0)).ok());
}

// Every string of a hello is bounded and of its form, refused before it is
// looked up or logged.
TEST_F(HelloTest, AHelloOutOfBoundsIsRefusedNamingItsField) {
  struct Case {
    const char* field;
    std::function<void(v1::WorkerHello*)> spoil;
  };
  const std::vector<Case> cases = {
      {"job_id", [](v1::WorkerHello* h) { h->set_job_id(std::string(1 << 20, 'j')); }},
      {"job_id", [](v1::WorkerHello* h) { h->set_job_id(h->job_id() + "\n[2099-01-01 00:00:00.000] [info] forged"); }},
      {"job_id", [](v1::WorkerHello* h) { h->set_job_id("job-NOTHEX00"); }},
      {"token", [](v1::WorkerHello* h) { h->set_token(std::string(100000, 'a')); }},
      {"node", [](v1::WorkerHello* h) { h->set_node("node\x1b[2J"); }},
      {"node", [](v1::WorkerHello* h) { h->set_node(std::string(256, 'n')); }},
      {"advertise_addr", [](v1::WorkerHello* h) { h->set_advertise_addr("10.0.0.1\nforged"); }},
      {"membership.store_addr",
       [](v1::WorkerHello* h) { h->mutable_membership()->set_store_addr(std::string(300, 'a')); }},
      {"membership.reason", [](v1::WorkerHello* h) { h->mutable_membership()->set_reason(std::string(5000, 'r')); }},
  };
  for (const Case& c : cases) {
    v1::WorkerHello hello = RankHello(0);
    c.spoil(&hello);
    const grpc::Status s = Hello(Open(tcp_.get(), job_.worker_token), hello);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << c.field;
    EXPECT_NE(s.error_message().find(std::string("field '") + c.field + "'"), std::string::npos)
        << c.field << ": " << s.error_message();
  }
  // Nothing of them reached the job: both ranks are still to come.
  EXPECT_EQ(manager_->Get(job_.id)->state, JobState::kStarting);
  EXPECT_TRUE(Hello(Open(tcp_.get(), job_.worker_token), RankHello(0)).ok());
}

}  // namespace
}  // namespace trainyard
