// trainctl watch: a job's states and a progress line (a bar and an ETA when
// its length is known) until it ends, following it to the leader when the
// stream breaks in a takeover.
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>

#include "client/job_format.h"
#include "client/trainctl.h"
#include "client/trainctl_impl.h"
#include "common/leader_hint_grpc.h"
#include "trainyard/v1/trainyard.grpc.pb.h"

namespace trainyard {

int Trainctl::Watch(const std::string& id, int printed_state) {
  Impl& s = *impl_;
  const bool tty = isatty(STDOUT_FILENO) && &s.out == &std::cout;
  v1::WatchJobRequest req;
  req.set_id(id);
  v1::WatchJobResponse resp;
  v1::Job job;
  bool have_job = false;
  auto start = std::chrono::steady_clock::now();
  auto last_line = start - std::chrono::hours(1);
  auto last_redraw = last_line;
  int64_t first_step = -1;
  std::string last_progress;
  grpc::Status st;
  // A stream that breaks in a takeover (several coordinators, or a
  // standby's answer) is opened again at the leader, found by a call that
  // goes through the list (Call), within kTakeoverWindow.
  std::optional<std::chrono::steady_clock::time_point> lost_since;
  for (;;) {
    grpc::ClientContext ctx;  // no deadline: a watch lasts as long as the job
    s.Authorize(&ctx);
    const std::string at = s.leader;
    auto reader = s.LeaderStub()->WatchJob(&ctx, req);
    bool read_any = false;
    while (reader->Read(&resp)) {
      read_any = true;
      lost_since.reset();
      if (resp.has_job()) {
        const bool changed = have_job ? resp.job().state() != job.state() : resp.job().state() != printed_state;
        job = resp.job();
        have_job = true;
        if (changed && !IsTerminalProto(job.state())) {
          if (tty && !last_progress.empty()) s.out << "\n";
          s.out << job.id() << ": " << StateName(job.state()) << " — " << Shown(job.reason()) << "\n";
          last_progress.clear();
        }
        continue;
      }
      if (!resp.has_metrics() || !have_job) continue;
      const v1::MetricsSample& m = resp.metrics();
      auto now = std::chrono::steady_clock::now();
      if (first_step < 0) {
        first_step = m.step();
        start = now;
      }
      // A script job's length is its own (max_steps 0): its steps, no bar.
      const bool known = job.max_steps() > 0;
      const int64_t max_steps = std::max<int64_t>(1, job.max_steps());
      const double elapsed = std::chrono::duration<double>(now - start).count();
      const int64_t done = m.step() - first_step;
      const double eta = done > 0 ? elapsed / done * (max_steps - m.step()) : NAN;
      const int width = 24;
      const int filled = static_cast<int>(width * std::min<int64_t>(m.step(), max_steps) / max_steps);
      std::ostringstream line;
      if (known) {
        line << "[" << std::string(filled, '#') << std::string(width - filled, '-') << "] step " << m.step() << "/"
             << max_steps;
      } else {
        line << "step " << m.step();
      }
      line << "  " << FormatRate(m.samples_per_second()) << " samples/s  loss " << FormatMetric(m.loss(), m.step() > 0);
      if (known) line << "  ETA " << FormatDuration(eta);
      last_progress = line.str();
      if (tty) {
        // At most ~10 redraws a second, as tqdm (and the last step always).
        if (now - last_redraw < std::chrono::milliseconds(100) && !(known && m.step() >= max_steps)) continue;
        last_redraw = now;
        s.out << "\r" << last_progress << "\033[K" << std::flush;
      } else if (now - last_line >= std::chrono::seconds(2) || (known && m.step() >= max_steps)) {
        s.out << last_progress << "\n" << std::flush;
        last_line = now;
      }
    }
    st = reader->Finish();
    if (st.error_code() == grpc::StatusCode::UNAVAILABLE && (s.addresses.size() > 1 || IsStandbyAnswer(st))) {
      if (const std::string hint = LeaderHint(ctx); !hint.empty()) s.leader = hint;
      // Refused at once again and again: paced, and within the window.
      if (!read_any && !s.AwaitLeader(st, &lost_since)) break;
      if (read_any) {
        if (tty && !last_progress.empty()) s.out << "\n";
        last_progress.clear();
        s.err << "trainctl: lost the watch's stream to " << at << " (" << st.error_message()
              << "); following the job at the leader\n";
      }
      // Where the leader is: a call through the list.
      v1::GetJobRequest get;
      get.set_id(id);
      v1::GetJobResponse got;
      grpc::Status found = s.Call(&v1::JobService::Stub::GetJob, get, &got);
      while (found.error_code() == grpc::StatusCode::UNAVAILABLE && s.AwaitLeader(found, &lost_since)) {
        found = s.Call(&v1::JobService::Stub::GetJob, get, &got);
      }
      if (found.ok()) continue;
      st = found;
    }
    break;
  }
  if (tty && !last_progress.empty()) s.out << "\r" << last_progress << "\033[K\n";  // the last, drawn or not
  if (!st.ok()) return s.Fail(st);
  if (!have_job) {
    s.err << "trainctl: the watch of " << id << " ended without news of the job\n";
    return 2;
  }
  if (!IsTerminalProto(job.state())) {
    s.err << "trainctl: the watch of " << id << " ended while the job was " << StateName(job.state()) << "\n";
    return 2;
  }
  s.out << job.id() << ": " << StateName(job.state()) << " — " << Shown(job.reason()) << "\n";
  if (s.options.output == OutputFormat::kJson) s.out << JobJson(job).dump(2) << "\n";
  return s.FinalCode(job);
}

}  // namespace trainyard
