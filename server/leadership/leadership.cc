#include "server/leadership/leadership.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace trainyard {

const char* RoleName(Leadership::Role role) { return role == Leadership::Role::kLeader ? "leader" : "standby"; }

Leadership::Leadership(std::unique_ptr<LeaseTable> table, LeadershipOptions options, const TimeSource* clock)
    : table_(std::move(table)), options_(options), clock_(clock) {}

Leadership::~Leadership() { Stop(); }

void Leadership::Start() {
  absl::MutexLock l(&mu_);
  if (thread_.joinable() || stopping_) return;
  thread_ = std::thread([this] { Run(); });
}

void Leadership::Stop() {
  {
    absl::MutexLock l(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

Leadership::View Leadership::view() const {
  absl::MutexLock l(&mu_);
  View v = view_;
  // Past the lease without a renewal this coordinator no longer leads, even
  // while its thread still waits on the database.
  if (v.role == Role::kLeader && clock_->SteadyNow() - last_renewal_sent_ >= options_.lease) {
    v.role = Role::kStandby;
    v.leader_address.clear();
    v.leader_http.clear();
  }
  return v;
}

std::optional<int64_t> Leadership::AwaitLeading() {
  absl::MutexLock l(&mu_);
  mu_.Await(absl::Condition(
      +[](Leadership* self)
           ABSL_EXCLUSIVE_LOCKS_REQUIRED(self->mu_) { return self->stopping_ || self->view_.role == Role::kLeader; },
      this));
  if (stopping_) return std::nullopt;
  return view_.term;
}

std::string Leadership::AwaitLost(int64_t term) {
  absl::MutexLock l(&mu_);
  while (true) {
    if (stopping_) return "";
    if (lost_term_ >= term) return lost_why_;
    if (view_.role != Role::kLeader || view_.term != term) return lost_why_;
    const TimeSource::Steady deadline = last_renewal_sent_ + options_.lease;
    if (clock_->SteadyNow() >= deadline) {
      // The thread is stuck on the database: the lease may be gone there.
      LoseLocked(absl::StrCat("no renewal of the lease succeeded for ",
                              std::chrono::duration<double>(options_.lease).count(), " s"));
      return lost_why_;
    }
    // Wakes for a change of role or Stop, and every 100 ms to look at the
    // deadline by the given clock.
    mu_.AwaitWithTimeout(absl::Condition(
                             +[](Leadership* self) ABSL_EXCLUSIVE_LOCKS_REQUIRED(self->mu_) {
                               return self->stopping_ || self->view_.role != Role::kLeader;
                             },
                             this),
                         absl::Milliseconds(100));
  }
}

void Leadership::StepDown(int64_t term, const std::string& reason) {
  absl::MutexLock l(&mu_);
  if (view_.role == Role::kLeader && view_.term == term) LoseLocked(reason);
}

void Leadership::LoseLocked(const std::string& reason) {
  spdlog::warn("leadership: stepping down from term {}: {}", view_.term, reason);
  lost_term_ = view_.term;
  lost_why_ = reason;
  view_.role = Role::kStandby;
  view_.why = reason;
  view_.leader_address.clear();
  view_.leader_http.clear();
}

bool Leadership::Pause(std::chrono::milliseconds d) {
  absl::MutexLock l(&mu_);
  mu_.AwaitWithTimeout(absl::Condition(&stopping_), absl::FromChrono(d));
  return !stopping_;
}

void Leadership::Run() {
  while (true) {
    Role role;
    {
      absl::MutexLock l(&mu_);
      if (stopping_) break;
      role = view_.role;
    }
    if (role == Role::kLeader) {
      Hold();
    } else {
      Campaign();
    }
  }
  int64_t term = 0;
  {
    absl::MutexLock l(&mu_);
    if (view_.role == Role::kLeader) term = view_.term;
  }
  if (term > 0) {
    if (absl::Status st = table_->Resign(term); !st.ok()) {
      spdlog::warn("leadership: could not give up the lease of term {} ({}): a standby takes over when it expires",
                   term, std::string(st.message()));
    } else {
      spdlog::info("leadership: gave up the lease of term {}", term);
    }
  }
}

void Leadership::Campaign() {
  const TimeSource::Steady sent = clock_->SteadyNow();
  auto taken = table_->TryTake();
  if (taken.ok() && taken->has_value()) {
    absl::MutexLock l(&mu_);
    view_.role = Role::kLeader;
    view_.term = **taken;
    view_.leader_address = table_->claim().address;
    view_.leader_http = table_->claim().http_address;
    last_renewal_sent_ = sent;
    spdlog::info("leadership: leading with term {}", view_.term);
    return;
  }
  if (taken.ok()) {
    auto row = table_->Read();
    absl::MutexLock l(&mu_);
    if (row.ok()) {
      view_.term = row->term;
      view_.leader_address = row->live ? row->address : "";
      view_.leader_http = row->live ? row->http_address : "";
    } else {
      view_.why = std::string(row.status().message());
    }
  } else {
    absl::MutexLock l(&mu_);
    view_.why = std::string(taken.status().message());
    view_.leader_address.clear();
  }
  Pause(options_.poll_every);
}

void Leadership::Hold() {
  const TimeSource::Steady sent = clock_->SteadyNow();
  int64_t term = 0;
  {
    absl::MutexLock l(&mu_);
    if (view_.role != Role::kLeader) return;
    term = view_.term;
    if (sent - last_renewal_sent_ >= options_.lease) {
      // Woken after the lease (a pause of the whole process): act on it
      // before anything else.
      LoseLocked(absl::StrCat("no renewal of the lease for ",
                              std::chrono::duration<double>(sent - last_renewal_sent_).count(), " s"));
      return;
    }
  }
  auto renewed = table_->Renew(term);
  {
    absl::MutexLock l(&mu_);
    if (view_.role != Role::kLeader || view_.term != term) return;
    if (renewed.ok() && *renewed) {
      last_renewal_sent_ = sent;
    } else if (renewed.ok()) {
      LoseLocked(absl::StrCat("another coordinator took the lease after term ", term));
      return;
    } else {
      view_.why = std::string(renewed.status().message());
      if (clock_->SteadyNow() - last_renewal_sent_ >= options_.lease) {
        LoseLocked(absl::StrCat("no renewal of the lease succeeded for ",
                                std::chrono::duration<double>(options_.lease).count(), " s: ", view_.why));
        return;
      }
    }
  }
  const auto spent = std::chrono::duration_cast<std::chrono::milliseconds>(clock_->SteadyNow() - sent);
  Pause(std::max(std::chrono::milliseconds(0), options_.renew_every - spent));
}

}  // namespace trainyard
