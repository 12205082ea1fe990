// trainctl against a stand-in JobService on loopback (a real gRPC server
// whose answers the test chooses): what each command sends, what it prints
// in table and JSON form, its exit codes, and the command line's flags before
// and after the subcommand (the real trainctl binary).
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>

#include "client/job_format.h"
#include "client/trainctl.h"
#include "common/leader_hint_grpc.h"
#include "tests/test_paths.h"
#include "tests/test_util.h"
#include "trainyard/v1/trainyard.grpc.pb.h"

namespace trainyard {
namespace {

class FakeJobService final : public v1::JobService::Service {
 public:
  grpc::Status GetJob(grpc::ServerContext* ctx, const v1::GetJobRequest* req, v1::GetJobResponse* resp) override {
    Record(ctx);
    if (req->id() != "job-1" && req->id() != "job-r") {
      return grpc::Status(grpc::StatusCode::NOT_FOUND, "job " + req->id() + " not found");
    }
    v1::Job* j = resp->mutable_job();
    if (req->id() == "job-r") {  // a replica job with rank 1 being replaced
      v1::Replicas* r = j->mutable_replicas();
      r->set_epoch(2);
      r->add_live(0);
      r->add_live(2);
      r->add_healing(1);
      r->set_min_replicas(1);
      r->set_size(3);
      r->add_leaving(3);
    }
    j->set_id(req->id());
    j->set_name("mnist");
    j->set_state(v1::RUNNING);
    j->set_num_processes(2);
    j->set_step(7);
    j->set_max_steps(100);
    j->set_spec_json(R"({"name":"mnist","max_steps":100})");
    v1::JobEvent* e = j->add_events();
    e->set_state(v1::QUEUED);
    e->set_reason("submitted");
    return grpc::Status::OK;
  }
  grpc::Status CheckpointJob(grpc::ServerContext* ctx, const v1::CheckpointJobRequest* req,
                             v1::CheckpointJobResponse* resp) override {
    Record(ctx);
    std::lock_guard<std::mutex> lock(mu);
    checkpoint_type = req->type();
    resp->set_request_id(42);
    return grpc::Status::OK;
  }

  // Five jobs, job-0 the oldest, in pages of two, in the order asked;
  // even ones alice's "mnist-N", odd ones bob's "trial-N". Records the
  // requests.
  grpc::Status ListJobs(grpc::ServerContext* ctx, const v1::ListJobsRequest* req, v1::ListJobsResponse* resp) override {
    Record(ctx);
    std::lock_guard<std::mutex> lock(mu);
    list_requests.push_back(*req);
    const int first = req->page_token().empty() ? 0 : std::stoi(req->page_token());
    for (int place = first; place < first + 2 && place < 5; ++place) {
      const int i = req->newest_first() ? 4 - place : place;
      v1::Job* j = resp->add_jobs();
      j->set_id("job-" + std::to_string(i));
      j->set_name((i % 2 ? "trial-" : "mnist-") + std::to_string(i));
      j->set_owner(i % 2 ? "bob" : "alice");
      j->set_state(v1::SUCCEEDED);
    }
    if (first + 2 < 5) resp->set_next_page_token(std::to_string(first + 2));
    return grpc::Status::OK;
  }

  // A script job's two ranks: rank 0's step read from its output, rank 1's
  // not known.
  grpc::Status DiagnoseJob(grpc::ServerContext* ctx, const v1::DiagnoseJobRequest*,
                           v1::DiagnoseJobResponse* resp) override {
    Record(ctx);
    resp->set_verdict("no rank is in a collective");
    resp->set_attempt(1);
    for (int rank : {0, 1}) {
      v1::FlightRecord* r = resp->add_ranks();
      r->set_rank(rank);
      r->set_phase("script");
      r->set_step(rank == 0 ? 12 : -1);
    }
    return grpc::Status::OK;
  }

  // job-live has not ended.
  grpc::Status DeleteJob(grpc::ServerContext* ctx, const v1::DeleteJobRequest* req, v1::DeleteJobResponse*) override {
    Record(ctx);
    std::lock_guard<std::mutex> lock(mu);
    deleted.push_back(req->id());
    if (req->id() == "job-live") {
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                          "job job-live has not ended (RUNNING); cancel it first (trainctl cancel)");
    }
    return grpc::Status::OK;
  }

  // Two waiting jobs: one with an estimated start, one without.
  grpc::Status GetQueue(grpc::ServerContext* ctx, const v1::GetQueueRequest* req, v1::GetQueueResponse* resp) override {
    Record(ctx);
    std::lock_guard<std::mutex> lock(mu);
    queue_all_users = req->all_users();
    v1::QueueEntry* a = resp->add_entries();
    a->set_position(1);
    a->set_id("job-a");
    a->set_owner("alice");
    a->set_priority_class("high");
    a->set_priority(1000);
    a->set_num_processes(4);
    a->set_resource("gpus");
    a->set_reason("waiting: preempting job-x to free GPUs");
    a->set_estimated_start_unix_millis(1700000000000);
    resp->set_free_slots(3);
    resp->set_free_gpus(1);
    v1::QueueEntry* b = resp->add_entries();
    b->set_position(2);
    b->set_id("job-b");
    b->set_owner("bob");
    b->set_priority(100);
    b->set_num_processes(1);
    b->set_resource("slots");
    b->set_reason("waiting: user bob uses 8 of 8 slots; this job needs 1");
    return grpc::Status::OK;
  }

  // Takes every job: job-s.
  grpc::Status SubmitJob(grpc::ServerContext* ctx, const v1::SubmitJobRequest*, v1::SubmitJobResponse* resp) override {
    Record(ctx);
    std::lock_guard<std::mutex> lock(mu);
    ++submits;
    resp->mutable_job()->set_id("job-s");
    resp->mutable_job()->set_name("mnist");
    resp->mutable_job()->set_state(v1::QUEUED);
    return grpc::Status::OK;
  }

  // job-1 running, then succeeded.
  grpc::Status WatchJob(grpc::ServerContext* ctx, const v1::WatchJobRequest* req,
                        grpc::ServerWriter<v1::WatchJobResponse>* writer) override {
    Record(ctx);
    for (const v1::JobState state : {v1::RUNNING, v1::SUCCEEDED}) {
      v1::WatchJobResponse resp;
      resp.mutable_job()->set_id(req->id());
      resp.mutable_job()->set_state(state);
      resp.mutable_job()->set_reason(state == v1::SUCCEEDED ? "done at the new leader" : "training");
      writer->Write(resp);
    }
    return grpc::Status::OK;
  }

  std::mutex mu;
  int submits = 0;
  bool queue_all_users = false;
  std::vector<v1::ListJobsRequest> list_requests;
  std::vector<std::string> deleted;  // the ids DeleteJob was asked for
  std::string authorization;         // of the last call
  v1::CheckpointType checkpoint_type = v1::CHECKPOINT_TYPE_UNSPECIFIED;

 private:
  void Record(grpc::ServerContext* ctx) {
    std::lock_guard<std::mutex> lock(mu);
    auto it = ctx->client_metadata().find("authorization");
    authorization = it == ctx->client_metadata().end() ? "" : std::string(it->second.data(), it->second.size());
  }
};

class TrainctlTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(port_, 0);
    address_ = "127.0.0.1:" + std::to_string(port_);
  }
  void TearDown() override { server_->Shutdown(); }

  int Run(const std::function<int(Trainctl&)>& command, OutputFormat format = OutputFormat::kTable,
          const std::string& token = "") {
    TrainctlOptions o;
    o.server = address_;
    o.output = format;
    o.token = token;
    o.rpc_timeout = std::chrono::seconds(5);
    out_.str("");
    err_.str("");
    Trainctl ctl(o, out_, err_);
    return command(ctl);
  }

  FakeJobService service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  std::string address_;
  std::ostringstream out_, err_;
};

TEST_F(TrainctlTest, GetPrintsATableAndJson) {
  ASSERT_EQ(Run([](Trainctl& c) { return c.Get("job-1"); }), 0) << err_.str();
  EXPECT_NE(out_.str().find("state:        RUNNING"), std::string::npos) << out_.str();
  EXPECT_NE(out_.str().find("step:         7 / 100"), std::string::npos) << out_.str();

  ASSERT_EQ(Run([](Trainctl& c) { return c.Get("job-1"); }, OutputFormat::kJson), 0) << err_.str();
  const nlohmann::json j = nlohmann::json::parse(out_.str());
  EXPECT_EQ(j["id"], "job-1");
  EXPECT_EQ(j["state"], "RUNNING");
  EXPECT_EQ(j["spec"]["max_steps"], 100);  // the spec as JSON, not a string
  ASSERT_EQ(j["events"].size(), 1u);
  EXPECT_EQ(j["events"][0]["reason"], "submitted");
}

TEST_F(TrainctlTest, GetShowsAReplicaJobsReplicas) {
  ASSERT_EQ(Run([](Trainctl& c) { return c.Get("job-r"); }), 0) << err_.str();
  EXPECT_NE(
      out_.str().find(
          "replicas:     2 live (ranks 0,2), 1 healing (ranks 1), 1 leaving (ranks 3); size 3, membership 2, min 1"),
      std::string::npos)
      << out_.str();
  ASSERT_EQ(Run([](Trainctl& c) { return c.Get("job-1"); }), 0) << err_.str();
  EXPECT_EQ(out_.str().find("replicas:"), std::string::npos) << out_.str();  // not a replica job

  ASSERT_EQ(Run([](Trainctl& c) { return c.Get("job-r"); }, OutputFormat::kJson), 0) << err_.str();
  const nlohmann::json j = nlohmann::json::parse(out_.str());
  EXPECT_EQ(j["replicas"]["epoch"], 2);
  EXPECT_EQ(j["replicas"]["live"], nlohmann::json::array({0, 2}));
  EXPECT_EQ(j["replicas"]["healing"], nlohmann::json::array({1}));
  EXPECT_EQ(j["replicas"]["min_replicas"], 1);
}

TEST_F(TrainctlTest, RefusalsAreExitCode2WithTheServersWords) {
  EXPECT_EQ(Run([](Trainctl& c) { return c.Get("job-2"); }), 2);
  EXPECT_EQ(err_.str(), "trainctl: NOT_FOUND: job job-2 not found\n");
  EXPECT_TRUE(out_.str().empty());
}

TEST_F(TrainctlTest, AnUnreachableServerIsNamed) {
  server_->Shutdown();
  EXPECT_EQ(Run([](Trainctl& c) { return c.Get("job-1"); }), 2);
  EXPECT_NE(err_.str().find("cannot reach the trainyard server at " + address_), std::string::npos) << err_.str();
}

TEST_F(TrainctlTest, EveryCallCarriesTheBearerToken) {
  ASSERT_EQ(Run([](Trainctl& c) { return c.Get("job-1"); }, OutputFormat::kTable, "s3cret-token-0123456789"), 0);
  EXPECT_EQ(service_.authorization, "Bearer s3cret-token-0123456789");
  ASSERT_EQ(Run([](Trainctl& c) { return c.Get("job-1"); }), 0);
  EXPECT_EQ(service_.authorization, "");
}

TEST_F(TrainctlTest, CheckpointTypesTravelAsTheProtoEnum) {
  const std::pair<std::string, v1::CheckpointType> cases[] = {
      {"full", v1::FULL}, {"sharded", v1::SHARDED}, {"auto", v1::CHECKPOINT_TYPE_UNSPECIFIED}};
  for (const auto& [name, want] : cases) {
    ASSERT_EQ(Run([&](Trainctl& c) { return c.Checkpoint("job-1", name, false, std::chrono::seconds(5)); }), 0)
        << err_.str();
    EXPECT_EQ(service_.checkpoint_type, want) << name;
  }
}

TEST_F(TrainctlTest, ListFollowsThePagesAndStopsAtTheLimit) {
  ASSERT_EQ(Run([](Trainctl& c) { return c.List(""); }, OutputFormat::kJson), 0) << err_.str();
  nlohmann::json all = nlohmann::json::parse(out_.str());
  ASSERT_EQ(all.size(), 5u);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(all[i]["id"], "job-" + std::to_string(4 - i));  // newest first
  ASSERT_EQ(service_.list_requests.size(), 3u);
  EXPECT_EQ(service_.list_requests[1].page_token(), "2");
  EXPECT_EQ(service_.list_requests[0].view(), v1::JOB_VIEW_FULL);  // JSON shows specs

  service_.list_requests.clear();
  ASSERT_EQ(Run([](Trainctl& c) { return c.List("succeeded", 3); }), 0) << err_.str();
  EXPECT_EQ(service_.list_requests.size(), 2u);  // two pages hold the first three
  EXPECT_EQ(service_.list_requests[0].view(), v1::JOB_VIEW_BASIC);
  ASSERT_EQ(service_.list_requests[0].states_size(), 1);
  EXPECT_EQ(service_.list_requests[0].states(0), v1::SUCCEEDED);
  EXPECT_TRUE(service_.list_requests[0].newest_first());
  // The three newest.
  EXPECT_NE(out_.str().find("job-2"), std::string::npos);
  EXPECT_NE(out_.str().find("job-4"), std::string::npos);
  EXPECT_EQ(out_.str().find("job-1"), std::string::npos) << out_.str();

  EXPECT_EQ(Run([](Trainctl& c) { return c.List("sleeping"); }), 2);
  EXPECT_NE(err_.str().find("unknown state 'sleeping'; accepted: QUEUED, STARTING, RUNNING"), std::string::npos)
      << err_.str();
}

// The binary: global flags (-o, --server) before or after the subcommand.
std::string RunBinary(const std::string& args, int* rc) {
  const std::string cmd = std::string(TRAINCTL_BINARY) + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  std::array<char, 4096> buf;
  while (size_t n = fread(buf.data(), 1, buf.size(), p)) out.append(buf.data(), n);
  *rc = WEXITSTATUS(pclose(p));
  return out;
}

TEST_F(TrainctlTest, QueueShowsOrderOwnersEstimatesAndReasons) {
  ASSERT_EQ(Run([](Trainctl& c) { return c.Queue(/*all_users=*/true); }), 0) << err_.str();
  EXPECT_TRUE(service_.queue_all_users);
  std::istringstream lines(out_.str());
  std::string header, first, second;
  std::getline(lines, header);
  std::getline(lines, first);
  std::getline(lines, second);
  EXPECT_EQ(header.rfind("POS  ID", 0), 0u) << header;
  EXPECT_NE(header.find("ESTIMATED START"), std::string::npos);
  EXPECT_EQ(first.rfind("1    job-a", 0), 0u) << first;
  EXPECT_NE(first.find("alice"), std::string::npos);
  EXPECT_NE(first.find("high"), std::string::npos);
  EXPECT_NE(first.find("gpus"), std::string::npos);
  EXPECT_NE(first.find("waiting: preempting job-x to free GPUs"), std::string::npos);
  EXPECT_NE(second.find("100"), std::string::npos) << "no class name: the number";
  EXPECT_NE(second.find("unknown"), std::string::npos) << second;
  EXPECT_NE(out_.str().find("\nFREE: 3 slots, 1 GPUs\n"), std::string::npos) << out_.str();

  ASSERT_EQ(Run([](Trainctl& c) { return c.Queue(); }, OutputFormat::kJson), 0) << err_.str();
  EXPECT_FALSE(service_.queue_all_users);
  const nlohmann::json j = nlohmann::json::parse(out_.str());
  ASSERT_EQ(j.size(), 2u);
  EXPECT_EQ(j[0]["owner"], "alice");
  EXPECT_EQ(j[0]["priority_class"], "high");
  EXPECT_EQ(j[1]["reason"], "waiting: user bob uses 8 of 8 slots; this job needs 1");
  EXPECT_EQ(j[1]["estimated_start"], "");
}

// --name and --owner: the newest matching jobs, across pages, up to the
// limit; --owner asks for everyone's jobs.
TEST_F(TrainctlTest, ListFiltersByNameAndOwnerNewestFirst) {
  ASSERT_EQ(Run([](Trainctl& c) { return c.List("", 0, false, "mnist"); }, OutputFormat::kJson), 0) << err_.str();
  nlohmann::json jobs = nlohmann::json::parse(out_.str());
  ASSERT_EQ(jobs.size(), 3u) << jobs.dump();
  EXPECT_EQ(jobs[0]["id"], "job-4");
  EXPECT_EQ(jobs[1]["id"], "job-2");
  EXPECT_EQ(jobs[2]["id"], "job-0");
  EXPECT_FALSE(service_.list_requests.back().all_users());

  ASSERT_EQ(Run([](Trainctl& c) { return c.List("", 1, false, "", "bob"); }, OutputFormat::kJson), 0) << err_.str();
  jobs = nlohmann::json::parse(out_.str());
  ASSERT_EQ(jobs.size(), 1u) << jobs.dump();
  EXPECT_EQ(jobs[0]["id"], "job-3");
  EXPECT_TRUE(service_.list_requests.back().all_users());

  // The binary's flags.
  int rc = -1;
  const std::string out = RunBinary("list --server " + address_ + " -A --owner alice --name mnist --limit 2", &rc);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("job-4"), std::string::npos) << out;
  EXPECT_NE(out.find("job-2"), std::string::npos) << out;
  EXPECT_EQ(out.find("job-0"), std::string::npos) << out;
  EXPECT_EQ(out.find("job-3"), std::string::npos) << out;
  EXPECT_LT(out.find("job-4"), out.find("job-2")) << out;
}

// A rank whose step is not known is "after step -", not "after step 0".
TEST_F(TrainctlTest, DiagnoseShowsAStepNotKnownAsADash) {
  ASSERT_EQ(Run([](Trainctl& c) { return c.Diagnose("job-1", std::chrono::seconds(1), 0); }), 0) << err_.str();
  EXPECT_NE(out_.str().find("rank 0: script after step 12 for"), std::string::npos) << out_.str();
  EXPECT_NE(out_.str().find("rank 1: script after step - for"), std::string::npos) << out_.str();
}

// delete: each id in turn, the server's refusal said, the others deleted.
TEST_F(TrainctlTest, DeleteSaysWhatWentAndWhatStays) {
  int rc = -1;
  const std::string out = RunBinary("delete job-1 job-live job-2 --server " + address_, &rc);
  EXPECT_EQ(rc, 2) << out;
  EXPECT_EQ(service_.deleted, (std::vector<std::string>{"job-1", "job-live", "job-2"}));
  EXPECT_NE(out.find("job-1: deleted"), std::string::npos) << out;
  EXPECT_NE(out.find("job-2: deleted"), std::string::npos) << out;
  EXPECT_NE(out.find("its files stay on disk"), std::string::npos) << out;
  EXPECT_NE(out.find("job job-live has not ended (RUNNING); cancel it first"), std::string::npos) << out;
}

TEST_F(TrainctlTest, ListAsksForEveryUsersJobsOnlyWhenTold) {
  ASSERT_EQ(Run([](Trainctl& c) { return c.List("", 1); }), 0) << err_.str();
  ASSERT_EQ(Run([](Trainctl& c) { return c.List("", 1, /*all_users=*/true); }), 0) << err_.str();
  std::lock_guard<std::mutex> lock(service_.mu);
  ASSERT_EQ(service_.list_requests.size(), 2u);
  EXPECT_FALSE(service_.list_requests[0].all_users());
  EXPECT_TRUE(service_.list_requests[1].all_users());
}

TEST_F(TrainctlTest, GlobalFlagsGoBeforeOrAfterTheSubcommand) {
  for (const std::string& args :
       {"-o json --server " + address_ + " get job-1", "get job-1 -o json --server " + address_,
        "--server " + address_ + " get -o json job-1"}) {
    int rc = -1;
    const std::string out = RunBinary(args, &rc);
    ASSERT_EQ(rc, 0) << args << ": " << out;
    EXPECT_EQ(nlohmann::json::parse(out)["id"], "job-1") << args;
  }
  int rc = -1;
  const std::string out = RunBinary("get job-1 -o yaml --server " + address_, &rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("yaml"), std::string::npos) << out;
}

}  // namespace
}  // namespace trainyard

namespace trainyard {
namespace {

// What a job writes cannot drive a terminal through trainctl: escape
// sequences, BEL, backspace, DEL and C1 controls are shown, not sent.
TEST(ShownTest, ControlCharactersAreShownNotSent) {
  EXPECT_EQ(Shown("plain text, äöü, 日本\n\ttab"), "plain text, äöü, 日本\n\ttab");
  EXPECT_EQ(Shown("\x1b]0;owned\x07\x1b[2Jgone\b\x7f"), "\\x1b]0;owned\\x07\\x1b[2Jgone\\x08\\x7f");
  EXPECT_EQ(Shown("a\xc2\x9b"
                  "31mred"),
            "a\\x9b31mred");  // CSI as a C1 control (U+009B)
  EXPECT_EQ(Shown("\r"), "\\x0d");
  EXPECT_EQ(Shown("10%\r20%", /*carriage_returns=*/true), "10%\r20%");  // a log's progress bar
}

// As kubectl: a mistyped command is named with the nearest one, a bare
// trainctl lists the commands, errors start with the program's name, and
// --version says which trainctl this is.
TEST(TrainctlCommandLine, UnknownCommandsBareTrainctlAndVersion) {
  int rc = -1;
  std::string out = RunBinary("lsit", &rc);
  EXPECT_EQ(rc, 2);
  EXPECT_NE(out.find("trainctl: unknown command \"lsit\" for \"trainctl\"; did you mean \"list\"?"), std::string::npos)
      << out;
  out = RunBinary("--server 127.0.0.1:1 frobnicate", &rc);
  EXPECT_EQ(rc, 2);
  EXPECT_NE(out.find("unknown command \"frobnicate\""), std::string::npos) << out;
  EXPECT_EQ(out.find("did you mean"), std::string::npos) << out;
  out = RunBinary("", &rc);
  EXPECT_EQ(rc, 0);
  for (const char* command : {"submit", "list", "cancel", "sweep"}) {
    EXPECT_NE(out.find(std::string("  ") + command), std::string::npos) << command << "\n" << out;
  }
  out = RunBinary("--version", &rc);
  EXPECT_EQ(rc, 0);
  EXPECT_EQ(out.rfind("trainctl 0.", 0), 0u) << out;
  out = RunBinary("get", &rc);
  EXPECT_EQ(rc, 2);
  EXPECT_EQ(out.rfind("trainctl: ", 0), 0u) << out;
}

// --help names what each option takes in the user's words (LINES,
// SECONDS, FILE...), never CLI11's own types and checks ("INT:INT in [0 -
// 1099511627776]", "TEXT", "INT:POSITIVE").
TEST(TrainctlCommandLine, HelpSaysWhatOptionsTakeInWords) {
  int rc = -1;
  std::string out = RunBinary("logs --help", &rc);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("--tail LINES"), std::string::npos) << out;
  const std::regex noise(R"(\b(TEXT|INT|UINT|FLOAT|POSITIVE|NONNEGATIVE)\b| in \[)");
  for (const char* command :
       {"",        "submit", "run",          "list",        "queue",       "get",        "watch",       "cancel",
        "delete",  "scale",  "checkpoint",   "checkpoints", "resume",      "join-info",  "logs",        "diagnose",
        "history", "sweep",  "sweep submit", "sweep get",   "sweep watch", "sweep list", "sweep cancel"}) {
    out = RunBinary(std::string(command) + " --help", &rc);
    EXPECT_EQ(rc, 0) << command << ": " << out;
    std::smatch m;
    EXPECT_FALSE(std::regex_search(out, m, noise)) << "trainctl " << command << " --help: '" << m.str() << "' in\n"
                                                   << out;
  }
}

// Coming from torchrun: a script given to submit, a sweep given to submit,
// a sweep's id given to cancel are each pointed to the command that takes
// them, before anything is sent (the server here does not exist).
TEST(TrainctlCommandLine, WhatComesFromTorchrunIsPointedToItsCommand) {
  TempDir dir;
  const std::string script = dir.path() + "/train.py";
  std::ofstream(script) << "print('hi')\n";
  const std::string sweep = dir.path() + "/sweep.yaml";
  std::ofstream(sweep) << "model: {kind: mlp}\nsweep: {parameters: {seed: {int: [1, 2]}}}\n";
  int rc = -1;
  std::string out = RunBinary("--server 127.0.0.1:1 submit " + script, &rc);
  EXPECT_EQ(rc, 2);
  EXPECT_NE(out.find("is a Python script, not a job spec: run it as a job with `trainctl run --nproc-per-node N"),
            std::string::npos)
      << out;
  out = RunBinary("--server 127.0.0.1:1 submit " + sweep, &rc);
  EXPECT_EQ(rc, 2);
  EXPECT_NE(out.find("has a sweep: section: submit it with `trainctl sweep submit"), std::string::npos) << out;
  out = RunBinary("--server 127.0.0.1:1 cancel sweep-0123abcd", &rc);
  EXPECT_EQ(rc, 2);
  EXPECT_NE(out.find("sweep-0123abcd is a sweep, not a job: `trainctl sweep cancel sweep-0123abcd`"), std::string::npos)
      << out;
  // torchrun's shape parses: SCRIPT and all after it are the script's (the
  // server here does not exist, so it ends at the call).
  for (const std::string& run : {"run --nproc-per-node 2 " + script + " -- --lr 1", "run " + script + " --lr 1"}) {
    out = RunBinary("--server 127.0.0.1:1 " + run, &rc);
    EXPECT_EQ(rc, 2);
    EXPECT_NE(out.find("cannot reach the trainyard server"), std::string::npos) << run << ": " << out;
  }
  out = RunBinary("--server 127.0.0.1:1 submit " + dir.path() + "/nothere.yaml", &rc);
  EXPECT_EQ(rc, 2);
  EXPECT_NE(out.find("nothere.yaml: No such file or directory"), std::string::npos) << out;
}

// High availability (issue 65): a coordinator that is a standby answers
// every call UNAVAILABLE with the leader's address in the trailing metadata
// (none when no coordinator leads yet); a watch it served ends so when it
// steps down.
class StandbyJobService final : public v1::JobService::Service {
 public:
  // `leader`: the address named ("": no leader yet); `stopping`: answers
  // UNAVAILABLE as a coordinator that is going away does, not as a standby.
  explicit StandbyJobService(std::string leader, bool stopping = false)
      : leader_(std::move(leader)), stopping_(stopping) {}
  grpc::Status GetJob(grpc::ServerContext* ctx, const v1::GetJobRequest*, v1::GetJobResponse*) override {
    return Answer(ctx);
  }
  grpc::Status SubmitJob(grpc::ServerContext* ctx, const v1::SubmitJobRequest*, v1::SubmitJobResponse*) override {
    return Answer(ctx);
  }
  // The job running, then the stream ends: this coordinator stepped down.
  grpc::Status WatchJob(grpc::ServerContext* ctx, const v1::WatchJobRequest* req,
                        grpc::ServerWriter<v1::WatchJobResponse>* writer) override {
    v1::WatchJobResponse resp;
    resp.mutable_job()->set_id(req->id());
    resp.mutable_job()->set_state(v1::RUNNING);
    resp.mutable_job()->set_reason("training");
    writer->Write(resp);
    return Answer(ctx);
  }
  int calls() {
    std::lock_guard<std::mutex> lock(mu_);
    return calls_;
  }

 private:
  grpc::Status Answer(grpc::ServerContext* ctx) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++calls_;
    }
    if (stopping_) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the coordinator is stopping");
    return AnswerAsStandby(ctx, leader_, 4);
  }
  const std::string leader_;
  const bool stopping_;
  std::mutex mu_;
  int calls_ = 0;
};

// A StandbyJobService on a port of loopback.
struct RunningStandby {
  explicit RunningStandby(const std::string& leader, bool stopping = false) : service(leader, stopping) {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&service);
    server = builder.BuildAndStart();
    address = "127.0.0.1:" + std::to_string(port);
  }
  ~RunningStandby() { server->Shutdown(); }
  StandbyJobService service;
  std::unique_ptr<grpc::Server> server;
  std::string address;
};

// Nothing listens there: the connection is refused.
constexpr char kDeadAddress[] = "127.0.0.1:1";

class TrainctlLeaderTest : public TrainctlTest {
 protected:
  int RunAt(const std::string& servers, const std::function<int(Trainctl&)>& command) {
    TrainctlOptions o;
    o.server = servers;
    o.rpc_timeout = std::chrono::seconds(5);
    out_.str("");
    err_.str("");
    Trainctl ctl(o, out_, err_);
    return command(ctl);
  }
};

TEST_F(TrainctlLeaderTest, AStandbysHintLeadsToTheLeaderEvenOutsideTheList) {
  RunningStandby standby(address_);
  // One address, a standby's: the call goes on to the leader it names, and
  // the next call of the same trainctl goes there first.
  ASSERT_EQ(RunAt(standby.address,
                  [](Trainctl& c) {
                    const int rc = c.Get("job-1");
                    return rc != 0 ? rc : c.Get("job-1");
                  }),
            0)
      << err_.str();
  EXPECT_NE(out_.str().find("state:        RUNNING"), std::string::npos) << out_.str();
  EXPECT_EQ(standby.service.calls(), 1);
  EXPECT_TRUE(err_.str().empty()) << err_.str();
}

TEST_F(TrainctlLeaderTest, UnreachableAndLeaderlessCoordinatorsArePassedOver) {
  RunningStandby leaderless("");
  ASSERT_EQ(RunAt(std::string(kDeadAddress) + "," + leaderless.address + ", " + address_,
                  [](Trainctl& c) { return c.Get("job-1"); }),
            0)
      << err_.str();
  EXPECT_NE(out_.str().find("state:        RUNNING"), std::string::npos) << out_.str();
  EXPECT_EQ(leaderless.service.calls(), 1);
  // The leader's refusals are the call's answer, as with one coordinator.
  EXPECT_EQ(RunAt(leaderless.address + "," + address_, [](Trainctl& c) { return c.Get("job-2"); }), 2);
  EXPECT_EQ(err_.str(), "trainctl: NOT_FOUND: job job-2 not found\n");
}

TEST_F(TrainctlLeaderTest, NoLeaderSaysWhatEachCoordinatorSaid) {
  RunningStandby leaderless("");
  const std::string list = std::string(kDeadAddress) + "," + leaderless.address;
  EXPECT_EQ(RunAt(list, [](Trainctl& c) { return c.Get("job-1"); }), 2);
  EXPECT_EQ(err_.str(), "trainctl: no trainyard server of " + list + " answered as the leader:\n  " + kDeadAddress +
                            ": cannot connect\n  " + leaderless.address +
                            ": this coordinator is a standby; no leader yet\n"
                            "Is trainyard-server running? Set --server or TRAINYARD_SERVER.\n");
  // The same trainctl again: the dead address's channel now waits in
  // TRANSIENT_FAILURE from the first call (it never shows CONNECTING
  // again), and is still said to refuse, at once.
  EXPECT_EQ(RunAt(list,
                  [](Trainctl& c) {
                    c.Get("job-1");
                    return c.Get("job-1");
                  }),
            2);
  EXPECT_NE(err_.str().rfind(std::string(kDeadAddress) + ": cannot connect\n"), std::string::npos) << err_.str();
  EXPECT_EQ(err_.str().find("no connection within the time allowed"), std::string::npos) << err_.str();
  // One coordinator that is not there: said as ever.
  EXPECT_EQ(RunAt(kDeadAddress, [](Trainctl& c) { return c.Get("job-1"); }), 2);
  EXPECT_NE(err_.str().find(std::string("cannot reach the trainyard server at ") + kDeadAddress), std::string::npos)
      << err_.str();
}

TEST_F(TrainctlLeaderTest, ASubmissionGoesOnOnlyWhereItWasNotTaken) {
  TempDir dir;
  const std::string spec = dir.path() + "/job.yaml";
  std::ofstream(spec) << "name: mnist\nnum_processes: 1\n";
  // Refused unsent (no connection) and by a standby: sent to the leader, once.
  RunningStandby standby("");
  ASSERT_EQ(RunAt(std::string(kDeadAddress) + "," + standby.address + "," + address_,
                  [&](Trainctl& c) { return c.Submit(spec, false); }),
            0)
      << err_.str();
  EXPECT_NE(out_.str().find("submitted job-s"), std::string::npos) << out_.str();
  EXPECT_EQ(service_.submits, 1);
  // A coordinator that got it and answered UNAVAILABLE may have taken it:
  // not sent again (a read is).
  RunningStandby stopping("", /*stopping=*/true);
  EXPECT_EQ(RunAt(stopping.address + "," + address_, [&](Trainctl& c) { return c.Submit(spec, false); }), 2);
  EXPECT_EQ(service_.submits, 1);
  EXPECT_EQ(stopping.service.calls(), 1);
  EXPECT_NE(err_.str().find("the coordinator is stopping"), std::string::npos) << err_.str();
  ASSERT_EQ(RunAt(stopping.address + "," + address_, [](Trainctl& c) { return c.Get("job-1"); }), 0) << err_.str();
}

TEST_F(TrainctlLeaderTest, AWatchFollowsTheJobToTheNewLeader) {
  // The watch's coordinator steps down mid-stream naming the new leader.
  RunningStandby old_leader(address_);
  ASSERT_EQ(RunAt(old_leader.address + "," + address_, [](Trainctl& c) { return c.Watch("job-1"); }), 0) << err_.str();
  EXPECT_NE(out_.str().find("job-1: RUNNING — training\n"), std::string::npos) << out_.str();
  EXPECT_NE(out_.str().find("job-1: SUCCEEDED — done at the new leader"), std::string::npos) << out_.str();
  // RUNNING once: the new leader's RUNNING is not news.
  EXPECT_EQ(out_.str().find("RUNNING"), out_.str().rfind("RUNNING")) << out_.str();
  EXPECT_NE(err_.str().find("lost the watch's stream to " + old_leader.address), std::string::npos) << err_.str();
}

TEST(TrainctlCommandLine, AServerListWithAnEmptyItemIsRefused) {
  int rc = -1;
  const std::string out = RunBinary("--server a:1,,b:2 get job-1", &rc);
  EXPECT_EQ(rc, 2);
  EXPECT_NE(
      out.find("trainctl: --server (or TRAINYARD_SERVER): coordinator address list \"a:1,,b:2\": item 2 is empty"),
      std::string::npos)
      << out;
}

// Issue 67: a sweep's table keeps its columns apart, a grid counts its
// trials, and the progress line names the best so far.
v1::Sweep SweepOfThree(const std::string& searcher) {
  v1::Sweep w;
  w.set_id("sweep-0000abcd");
  w.set_state(v1::RUNNING);
  w.set_searcher(searcher);
  w.set_metric("loss");
  w.set_metric_scope("last");
  w.set_concurrency(2);
  w.set_total_trials(3);
  w.add_parameters("optimizer.lr");
  w.set_best_trial(1);
  const double values[] = {2.6077028500001e-08, 1.8123456789, 0.5};
  for (int i = 0; i < 3; ++i) {
    v1::SweepTrial* t = w.add_trials();
    t->set_number(i);
    t->set_job_id("job-0000000" + std::to_string(i));
    t->set_state(i == 2 ? v1::QUEUED : v1::SUCCEEDED);
    t->set_has_metric(i < 2);
    t->set_best_metric(values[i]);
    t->set_step(-123456789012);  // as wide as a step gets
    t->set_rank_seconds(1234567.25);
    t->add_values(i == 0 ? "0.000123456789012345678" : "0.01");
  }
  return w;
}

TEST(SweepFormat, TheTrialTableKeepsEveryColumnApartWithFourDigits) {
  std::ostringstream out;
  PrintTrialTable(SweepOfThree("random"), out);
  const std::string text = out.str();
  EXPECT_NE(text.find(" 2.608e-08 "), std::string::npos) << text;
  EXPECT_NE(text.find(" 1.812 "), std::string::npos) << text;
  EXPECT_EQ(text.find("2.60770285"), std::string::npos) << text;
  // Every cell is followed by at least two spaces: the header's columns
  // start where each row's do.
  std::istringstream lines(text);
  std::string header, row;
  std::getline(lines, header);
  for (const char* column : {"JOB", "STATE", "STEP", "RUNGS", "VALUE", "RANK-S", "optimizer.lr", "REASON"}) {
    const size_t at = header.find(column);
    ASSERT_NE(at, std::string::npos) << column;
    ASSERT_EQ(header[at - 1], ' ') << column;
    std::istringstream again(text);
    std::getline(again, row);
    while (std::getline(again, row)) {
      ASSERT_GE(row.size(), at) << row;
      EXPECT_EQ(row[at - 1], ' ') << column << " in\n" << text;
      EXPECT_EQ(row[at - 2], ' ') << column << " in\n" << text;
    }
  }
}

TEST(SweepFormat, AGridCountsItsTrials) {
  EXPECT_EQ(SweepTrialsLine(SweepOfThree("grid")), "3 of 3 (grid), 2 at once");
  EXPECT_EQ(SweepTrialsLine(SweepOfThree("asha")), "3 of 3, 2 at once");
  v1::Sweep pbt = SweepOfThree("pbt");
  EXPECT_EQ(SweepTrialsLine(pbt), "3 started (a population of 3 and their replacements), 2 at once");
}

TEST(SweepFormat, TheProgressLineNamesTheBestSoFar) {
  v1::Sweep w = SweepOfThree("random");
  EXPECT_EQ(SweepProgressLine(w),
            "sweep-0000abcd: RUNNING, 3 of 3, 2 at once, 1 live, 2 ended; best: trial 1 (job-00000001), loss 1.812");
  w.set_best_trial(-1);
  EXPECT_NE(SweepProgressLine(w).find("best: none yet"), std::string::npos);
}

}  // namespace
}  // namespace trainyard
