// trainctl logs: a rank's log of one attempt or of all, its last lines,
// following it to the job's end (as kubectl logs).
#include <unistd.h>

#include <chrono>
#include <iostream>
#include <string_view>
#include <thread>
#include <vector>

#include "client/trainctl.h"
#include "client/trainctl_impl.h"

namespace trainyard {

int Trainctl::Logs(const std::string& id, const LogsOptions& o) {
  Impl& s = *impl_;
  // On a terminal, what the job wrote cannot drive it (Shown); into a pipe
  // or a file, it goes as it is.
  const bool tty = isatty(STDOUT_FILENO) && &s.out == &std::cout;
  auto show = [&](std::string_view text) { return tty ? Shown(text, /*carriage_returns=*/true) : std::string(text); };
  auto fetch = [&](int attempt, int64_t offset, v1::GetLogsResponse* resp) {
    v1::GetLogsRequest req;
    req.set_id(id);
    req.set_rank(o.rank);
    req.set_attempt(attempt);
    req.set_tail_bytes(o.limit_bytes);
    req.set_offset(offset);
    return s.Call(&v1::JobService::Stub::GetLogs, req, resp);
  };
  // The last `tail_lines` lines of a log's end.
  auto print_tail = [&](const v1::GetLogsResponse& resp) {
    std::string_view text = resp.content();
    if (o.tail_lines >= 0) {
      size_t at = text.size();
      if (!text.empty() && text.back() == '\n') --at;
      for (int64_t n = 0; n < o.tail_lines && at != std::string_view::npos && at > 0; ++n) {
        at = text.rfind('\n', at - 1);
      }
      if (o.tail_lines == 0) {
        text = {};
      } else if (at != std::string_view::npos && at < text.size() && at > 0) {
        text.remove_prefix(at + 1);
      }
    } else if (resp.truncated()) {
      s.out << "... (showing the last " << resp.content().size() << " bytes of " << resp.path() << ")\n";
    }
    s.out << show(text) << std::flush;
  };
  std::vector<int> attempts = {o.attempt};
  if (o.all_attempts) {
    v1::GetJobRequest req;
    req.set_id(id);
    v1::GetJobResponse job;
    if (grpc::Status st = s.Call(&v1::JobService::Stub::GetJob, req, &job); !st.ok()) return s.Fail(st);
    attempts.clear();
    for (int a = 1; a <= job.job().attempt(); ++a) attempts.push_back(a);
    if (attempts.empty()) attempts.push_back(0);  // not started: the server says so
  }
  v1::GetLogsResponse resp;
  for (int a : attempts) {
    resp.Clear();
    grpc::Status st = fetch(a, 0, &resp);
    if (!st.ok()) return s.Fail(st);
    if (o.all_attempts)
      s.out << "==> attempt " << resp.attempt() << ", rank " << o.rank << ": " << resp.path() << " <==\n";
    print_tail(resp);
  }
  if (!o.follow) return 0;
  // Follow the last attempt printed: what it writes, until the job ends
  // and nothing more comes.
  const int attempt = resp.attempt();
  int64_t offset = resp.size();
  // A takeover (several coordinators) is waited out: the polls go to the
  // leader (Call), within kTakeoverWindow.
  std::optional<std::chrono::steady_clock::time_point> lost_since;
  for (;;) {
    const bool ended = IsTerminalProto(Impl::LastState(s, id));
    v1::GetLogsResponse more;
    // From `offset` on; at 0 (an empty log so far) the log's end, all of it
    // while it is under the limit.
    grpc::Status st = fetch(attempt, offset, &more);
    if (!st.ok()) {
      if (s.AwaitLeader(st, &lost_since)) continue;
      return s.Fail(st);
    }
    lost_since.reset();
    s.out << show(more.content()) << std::flush;
    offset = more.size();
    if (ended && more.content().empty()) return 0;
    if (more.content().empty()) std::this_thread::sleep_for(std::chrono::milliseconds(500));  // polls the log
  }
}

}  // namespace trainyard
