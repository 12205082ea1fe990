// RefusalLog: requests refused on a job, one line per (job, user) in the
// job's events however often it was refused — the first refusal is the
// event, and its text says how many followed and since when.
//
// Not thread-safe: the JobManager calls it under its mutex.
#ifndef TRAINYARD_SERVER_JOBS_REFUSAL_LOG_H_
#define TRAINYARD_SERVER_JOBS_REFUSAL_LOG_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/job_record.h"

namespace trainyard {

class RefusalLog {
 public:
  // `user` (described as `who`) was refused `refusal` on job `id` at
  // `unix_millis`: the event to record, the first time only.
  std::optional<std::string> Refused(const std::string& id, const std::string& user, const std::string& who,
                                     const std::string& refusal, int64_t unix_millis);
  // Job `id`'s events with each refusal event counted.
  void Annotate(const std::string& id, std::vector<JobEvent>* events) const;

 private:
  struct Refusals {
    std::string event;  // the stored event's reason
    std::string who;
    int64_t count = 0;
    int64_t since_unix_millis = 0;
  };
  std::map<std::pair<std::string, std::string>, Refusals> refused_;  // by (job, user)
};

}  // namespace trainyard

#endif  // TRAINYARD_SERVER_JOBS_REFUSAL_LOG_H_
