// ExternalLauncher: starts nothing; stops an attempt's ranks by a command
// down their streams.
#include "server/launch/external_launcher.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace trainyard {
namespace {

TEST(ExternalLauncherTest, StartsNothingAndStopsByCommand) {
  std::vector<std::string> sent;
  ExternalLauncher e([&](const std::string& id, int32_t attempt, const WorkerCommand& command) {
    sent.push_back(id + "#" + std::to_string(attempt) + ":" + command.reason);
  });
  EXPECT_TRUE(e.traits().ranks_join);
  EXPECT_FALSE(e.traits().on_this_host);
  EXPECT_TRUE(e.Launch(LaunchRequest{}).ok());
  EXPECT_TRUE(e.Available().ok());
  EXPECT_EQ(e.LiveProcesses("job-1"), 0);
  e.Stop("job-1", 3);
  EXPECT_EQ(sent, std::vector<std::string>{"job-1#3:the attempt is stopping"});
}

}  // namespace
}  // namespace trainyard
