// ScriptChannel against the same lines the `trainyard` package is tested
// with (tests/fixtures/script_channel/, tests/python/script_channel_test.py):
// each message the script sends is read as its typed message and written
// back byte for byte; each state the worker sends is written as the fixture's
// line. Then the channel over a real socket pair.
#include "worker/script/script_channel.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "tests/test_paths.h"

namespace trainyard {
namespace {

std::string Fixture(const std::string& name) {
  std::ifstream in(std::string(TRAINYARD_SOURCE_DIR) + "/tests/fixtures/script_channel/" + name);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_FALSE(text.str().empty()) << name;
  return text.str();
}

// The fixture `name` read as a message, and `expected` written as its line.
void ExpectMessage(const std::string& name, const ScriptMessage& expected) {
  const std::string line = Fixture(name);
  std::optional<ScriptMessage> read = ParseScriptMessage(std::string_view(line).substr(0, line.size() - 1));
  ASSERT_TRUE(read.has_value()) << name;
  EXPECT_EQ(*read, expected) << name;
  EXPECT_EQ(ScriptMessageLine(expected), line) << name;
}

void ExpectState(const std::string& name, const ScriptState& expected) {
  const std::string line = Fixture(name);
  EXPECT_EQ(ScriptStateLine(expected), line) << name;
  std::optional<ScriptState> read = ParseScriptState(line);
  ASSERT_TRUE(read.has_value()) << name;
  EXPECT_EQ(*read, expected) << name;
}

TEST(ScriptChannelTest, MessagesFromTheScript) {
  ExpectMessage("hello.json", ScriptHello{});
  ExpectMessage("report.json", ScriptReport{7, 32, 2.5, 0.25, {{"accuracy", 0.75}}});
  ExpectMessage("report_first.json", ScriptReport{1, std::nullopt, std::nullopt, std::nullopt, {}});
  ExpectMessage("report_total.json", ScriptReport{3, std::nullopt, std::nullopt, std::nullopt, {}, 1000});
  ExpectMessage("saved_on_request.json", ScriptSaved{"/project/checkpoints/checkpoint_3", 12, 77});
  ExpectMessage("saved_by_script.json", ScriptSaved{"/project/checkpoints/checkpoint_4", std::nullopt, 0});
}

TEST(ScriptChannelTest, StatesFromTheWorker) {
  ExpectState("state_idle.json", ScriptState{});
  ExpectState("state_checkpoint.json", ScriptState{CheckpointType::kSharded, 77, false});
  ExpectState("state_stop.json", ScriptState{CheckpointType::kFull, 9, true});
  // The job's automatic type is asked for as a full checkpoint.
  EXPECT_EQ(ScriptStateLine(ScriptState{CheckpointType::kAuto, 9, true}), Fixture("state_stop.json"));
}

TEST(ScriptChannelTest, WhatIsNoMessage) {
  EXPECT_FALSE(ParseScriptMessage("not json").has_value());
  EXPECT_FALSE(ParseScriptMessage("[1, 2]").has_value());
  // An op this worker does not know still shows the script talks.
  EXPECT_EQ(ParseScriptMessage(R"({"op":"later"})"), ScriptMessage(ScriptUnknown{"later"}));
  // Fields of the wrong type read as absent; other numbers are left out.
  const std::optional<ScriptMessage> m =
      ParseScriptMessage(R"({"op":"report","step":"x","loss":"low","values":{"a":1,"b":"two"}})");
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(*m, ScriptMessage(ScriptReport{0, std::nullopt, std::nullopt, std::nullopt, {{"a", 1.0}}}));
}

TEST(ScriptChannelTest, OverASocketPair) {
  absl::StatusOr<ScriptChannel> channel = ScriptChannel::Open();
  ASSERT_TRUE(channel.ok()) << channel.status();
  const int script = channel->script_end();
  ASSERT_GE(script, 0);
  EXPECT_TRUE(channel->Read().empty()) << "nothing written yet: no wait";
  // A message in two writes, and a line that is no message.
  const std::string hello = Fixture("hello.json"), report = Fixture("report.json");
  ASSERT_EQ(write(script, hello.data(), 5), 5);
  EXPECT_TRUE(channel->Read().empty()) << "half a line";
  const std::string rest = hello.substr(5) + "garbage\n" + report;
  ASSERT_EQ(write(script, rest.data(), rest.size()), static_cast<ssize_t>(rest.size()));
  const std::vector<ScriptMessage> messages = channel->Read();
  ASSERT_EQ(messages.size(), 2u);
  EXPECT_EQ(messages[0], ScriptMessage(ScriptHello{}));
  EXPECT_EQ(std::get<ScriptReport>(messages[1]).step, 7);
  // The worker's state arrives as its line.
  channel->Send(ScriptState{CheckpointType::kSharded, 77, false});
  const std::string expected = Fixture("state_checkpoint.json");
  std::string got(expected.size(), '\0');
  ASSERT_EQ(read(script, got.data(), got.size()), static_cast<ssize_t>(got.size()));
  EXPECT_EQ(got, expected);
  // The script's end closed: the channel sees the end of input.
  EXPECT_TRUE(channel->open());
  channel->CloseScriptEnd();
  EXPECT_EQ(channel->script_end(), -1);
  EXPECT_TRUE(channel->Read().empty());
  EXPECT_FALSE(channel->open());
}

}  // namespace
}  // namespace trainyard
