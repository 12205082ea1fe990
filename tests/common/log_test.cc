// log::Escaped, which every string a peer sends passes through before the
// log: no line can be forged, no megabytes written.
#include "common/log.h"

#include <gtest/gtest.h>

#include <string>

#include "common/job_record.h"

namespace trainyard {
namespace {

TEST(LogEscapedTest, PrintableAsciiStaysTheRestIsHex) {
  EXPECT_EQ(log::Escaped("job-0123abcd rank 1"), "job-0123abcd rank 1");
  EXPECT_EQ(log::Escaped("a\nb\r\x1b[31mred\x7f"), "a\\x0ab\\x0d\\x1b[31mred\\x7f");
  EXPECT_EQ(log::Escaped("back\\slash"), "back\\\\slash");  // a literal "\x0a" stays distinguishable
  EXPECT_EQ(log::Escaped("caf\xc3\xa9"), "caf\\xc3\\xa9");
  EXPECT_EQ(log::Escaped(std::string("nul\0!", 5)), "nul\\x00!");
}

TEST(LogEscapedTest, LongInputIsCutAndSaysItsSize) {
  const std::string huge(4 << 20, 'x');
  const std::string shown = log::Escaped(huge, 200);
  EXPECT_EQ(shown, std::string(200, 'x') + "... (4194304 bytes in all)");
  // Cut by input bytes: an input of newlines grows fourfold at most.
  EXPECT_LE(log::Escaped(std::string(1 << 20, '\n'), 100).size(), 400u + 40u);
}

TEST(JobIdTest, OnlyTheFormNewIdMakes) {
  EXPECT_TRUE(IsJobId("job-0123abcd"));
  EXPECT_FALSE(IsJobId(""));
  EXPECT_FALSE(IsJobId("job-"));
  EXPECT_FALSE(IsJobId("job-0123ABCD"));
  EXPECT_FALSE(IsJobId("job-0123abc"));
  EXPECT_FALSE(IsJobId("job-0123abcde"));
  EXPECT_FALSE(IsJobId("job-0123abc\n"));
  EXPECT_FALSE(IsJobId("sweep-0123abcd"));
  EXPECT_FALSE(IsJobId(std::string(1 << 20, 'a')));
}

}  // namespace
}  // namespace trainyard
