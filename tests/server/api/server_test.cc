// Server: the coordinator wired from its nested options — it starts on
// free ports, says them in its ready file, and refuses what it cannot run.
#include "server/api/server.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "tests/test_util.h"

namespace trainyard {
namespace {

ServerOptions Options(const TempDir& dir) {
  ServerOptions o;
  o.listen = "127.0.0.1:0";
  o.metrics_listen = "127.0.0.1:0";
  o.ready_file = dir.path() + "/ready.json";
  o.jobs.state_dir = dir.path() + "/state";
  o.jobs.slots = 2;
  o.jobs.gpus = 0;
  return o;
}

TEST(ServerTest, StartsOnFreePortsAndSaysThemInItsReadyFile) {
  TempDir dir;
  Server server(Options(dir));
  ASSERT_TRUE(server.Start().ok());
  EXPECT_GT(server.grpc_port(), 0);
  EXPECT_GT(server.metrics_port(), 0);
  std::stringstream ready;
  ready << std::ifstream(dir.path() + "/ready.json").rdbuf();
  EXPECT_NE(ready.str().find("\"grpc_port\": " + std::to_string(server.grpc_port())), std::string::npos) << ready.str();
  EXPECT_TRUE(std::ifstream(dir.path() + "/state/trainyard.db").good());           // the store, under jobs.state_dir
  EXPECT_EQ(server.ReloadPolicy().code(), absl::StatusCode::kFailedPrecondition);  // no policy file
  server.Shutdown();
}

TEST(ServerTest, RefusesALauncherThatIsNoKind) {
  TempDir dir;
  ServerOptions o = Options(dir);
  o.jobs.default_launcher = LauncherKind::kDefault;
  Server server(o);
  const absl::Status s = server.Start();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(s.message()).find("--launcher"), std::string::npos) << s;
}

TEST(ServerTest, TlsWithoutACaForTheWorkersIsRefused) {
  TempDir dir;
  ServerOptions o = Options(dir);
  o.tls.cert = dir.path() + "/cert.pem";
  o.tls.key = dir.path() + "/key.pem";
  Server server(o);
  const absl::Status s = server.Start();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(std::string(s.message()).find("--tls-worker-ca"), std::string::npos) << s;
}

}  // namespace
}  // namespace trainyard
