#include "common/leader_hint.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace trainyard {

std::string StandbyMessage(const std::string& leader, int64_t term) {
  if (leader.empty()) return absl::StrCat(kStandbyMessagePrefix, "no leader yet");
  return absl::StrCat(kStandbyMessagePrefix, "the leader is at ", leader, " (term ", term, ")");
}

bool IsStandbyMessage(std::string_view message) {
  return absl::StartsWith(absl::string_view(message.data(), message.size()), kStandbyMessagePrefix);
}

absl::StatusOr<std::vector<std::string>> SplitAddresses(const std::string& list) {
  std::vector<std::string> out;
  int index = 0;
  for (absl::string_view item : absl::StrSplit(list, ',')) {
    ++index;
    const absl::string_view trimmed = absl::StripAsciiWhitespace(item);
    if (trimmed.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("coordinator address list \"", list, "\": item ", index,
                       " is empty (write the addresses as HOST:PORT,HOST:PORT, without empty items)"));
    }
    if (trimmed.find_first_of(" \t\r\n") != absl::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat("coordinator address list \"", list, "\": item ", index, " (\"",
                                                     trimmed,
                                                     "\") has a space inside; separate addresses with commas"));
    }
    std::string address(trimmed);
    if (std::find(out.begin(), out.end(), address) == out.end()) out.push_back(std::move(address));
  }
  return out;
}

std::vector<std::string> TryOrder(const std::vector<std::string>& addresses, const std::string& preferred) {
  std::vector<std::string> order;
  order.reserve(addresses.size() + 1);
  if (!preferred.empty()) order.push_back(preferred);
  for (const std::string& a : addresses) {
    if (a != preferred) order.push_back(a);
  }
  return order;
}

}  // namespace trainyard
