// The standby convention (common/leader_hint.h): the message, the address
// lists, the order of tries, and the hint carried in a real gRPC call's
// trailing metadata.
#include "common/leader_hint.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "common/leader_hint_grpc.h"
#include "trainyard/v1/trainyard.grpc.pb.h"

namespace trainyard {
namespace {

TEST(LeaderHintTest, StandbyMessageNamesTheLeaderAndTerm) {
  EXPECT_EQ(StandbyMessage("b:50051", 7), "this coordinator is a standby; the leader is at b:50051 (term 7)");
  EXPECT_EQ(StandbyMessage("", 0), "this coordinator is a standby; no leader yet");
  EXPECT_TRUE(IsStandbyMessage(StandbyMessage("b:50051", 7)));
  EXPECT_TRUE(IsStandbyMessage(StandbyMessage("", 0)));
  EXPECT_FALSE(IsStandbyMessage("failed to connect to all addresses"));
}

TEST(LeaderHintTest, SplitAddressesTrimsAndKeepsOrder) {
  EXPECT_EQ(*SplitAddresses("127.0.0.1:50051"), std::vector<std::string>{"127.0.0.1:50051"});
  EXPECT_EQ(*SplitAddresses(" a:1 ,\tb:2,c:3 "), (std::vector<std::string>{"a:1", "b:2", "c:3"}));
  EXPECT_EQ(*SplitAddresses("[::1]:50051,a:1,a:1"), (std::vector<std::string>{"[::1]:50051", "a:1"}));
}

TEST(LeaderHintTest, SplitAddressesRefusesEmptyItemsNamingThem) {
  for (const char* bad : {"", "a:1,,b:2", "a:1,", ",a:1", " , "}) {
    absl::StatusOr<std::vector<std::string>> r = SplitAddresses(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("is empty"), std::string::npos) << r.status();
  }
  absl::StatusOr<std::vector<std::string>> r = SplitAddresses("a:1,,b:2");
  EXPECT_NE(r.status().message().find("item 2 is empty"), std::string::npos) << r.status();
  r = SplitAddresses("a:1,b c:2");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("item 2 (\"b c:2\") has a space inside"), std::string::npos) << r.status();
}

TEST(LeaderHintTest, TryOrderPutsTheLastLeaderFirst) {
  const std::vector<std::string> list = {"a:1", "b:2", "c:3"};
  EXPECT_EQ(TryOrder(list, ""), list);
  EXPECT_EQ(TryOrder(list, "b:2"), (std::vector<std::string>{"b:2", "a:1", "c:3"}));
  EXPECT_EQ(TryOrder(list, "d:4"), (std::vector<std::string>{"d:4", "a:1", "b:2", "c:3"}));  // a hint not in the list
}

// A JobService whose GetJob answers as a standby naming `leader`.
class Standby final : public v1::JobService::Service {
 public:
  explicit Standby(std::string leader) : leader_(std::move(leader)) {}
  grpc::Status GetJob(grpc::ServerContext* ctx, const v1::GetJobRequest*, v1::GetJobResponse*) override {
    return AnswerAsStandby(ctx, leader_, 3);
  }

 private:
  std::string leader_;
};

TEST(LeaderHintTest, TheHintTravelsInTheTrailingMetadata) {
  for (const std::string leader : {"10.0.0.2:50051", ""}) {
    Standby service(leader);
    int port = 0;
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&service);
    std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
    ASSERT_NE(port, 0);
    auto stub = v1::JobService::NewStub(
        grpc::CreateChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials()));
    grpc::ClientContext ctx;
    v1::GetJobRequest req;
    v1::GetJobResponse resp;
    const grpc::Status st = stub->GetJob(&ctx, req, &resp);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE);
    EXPECT_TRUE(IsStandbyAnswer(st)) << st.error_message();
    EXPECT_EQ(st.error_message(), StandbyMessage(leader, 3));
    EXPECT_EQ(LeaderHint(ctx), leader);
    server->Shutdown();
  }
  // A call that reached no server has no hint and is no standby's answer.
  auto stub = v1::JobService::NewStub(grpc::CreateChannel("127.0.0.1:1", grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  v1::GetJobResponse resp;
  const grpc::Status st = stub->GetJob(&ctx, v1::GetJobRequest(), &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_FALSE(IsStandbyAnswer(st));
  EXPECT_EQ(LeaderHint(ctx), "");
}

}  // namespace
}  // namespace trainyard
