#include "server/jobs/refusal_log.h"

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"

namespace trainyard {

std::optional<std::string> RefusalLog::Refused(const std::string& id, const std::string& user, const std::string& who,
                                               const std::string& refusal, int64_t unix_millis) {
  Refusals& r = refused_[{id, user}];
  if (r.count++ > 0) return std::nullopt;
  r.event = absl::StrCat("refused: ", refusal);
  r.who = who;
  r.since_unix_millis = unix_millis;
  return r.event;
}

void RefusalLog::Annotate(const std::string& id, std::vector<JobEvent>* events) const {
  for (auto it = refused_.lower_bound({id, ""}); it != refused_.end() && it->first.first == id; ++it) {
    const Refusals& r = it->second;
    for (JobEvent& e : *events) {
      if (e.reason != r.event) continue;
      e.reason = absl::StrCat(
          r.event, " (refused ", r.count, r.count == 1 ? " request" : " requests", " of ", r.who, " since ",
          absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::FromUnixMillis(r.since_unix_millis), absl::UTCTimeZone()), ")");
      break;
    }
  }
}

}  // namespace trainyard
