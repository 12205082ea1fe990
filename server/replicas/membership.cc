#include "server/replicas/membership.h"

#include <algorithm>
#include <stdexcept>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace trainyard {

Membership::Membership(int32_t world_size, int32_t min_replicas, const TimeSource* clock, int32_t started, int32_t unit)
    : world_size_(world_size),
      unit_(std::max(1, unit)),
      min_replicas_(std::max(1, min_replicas)),
      clock_(clock),
      states_(static_cast<size_t>(std::max(0, world_size)), State::kLaunched) {
  if (world_size_ % unit_ != 0) {
    throw std::invalid_argument(absl::StrCat("membership: ", unit_, " ranks per replica do not divide ", world_size_));
  }
  if (started <= 0) return;
  for (int32_t r = started; r < world_size_; ++r) states_[r] = State::kParked;
}

int Membership::healing() const { return static_cast<int>(healing_ranks().size()); }

int Membership::healing_replicas() const {
  std::set<int32_t> replicas;
  for (int32_t r : healing_ranks()) replicas.insert(r / unit_);
  return static_cast<int>(replicas.size());
}

std::vector<int32_t> Membership::ReplicaOf(int32_t rank) const {
  std::vector<int32_t> out;
  for (int32_t r = rank / unit_ * unit_; r < (rank / unit_ + 1) * unit_; ++r) out.push_back(r);
  return out;
}

std::vector<int32_t> Membership::healing_ranks() const {
  std::vector<int32_t> out;
  for (int32_t r = 0; r < world_size_; ++r) {
    if ((states_[r] == State::kLost || states_[r] == State::kHealing) && !growing_.count(r)) out.push_back(r);
  }
  return out;
}

std::vector<int32_t> Membership::leaving_ranks() const {
  std::vector<int32_t> out;
  for (int32_t r = 0; r < world_size_; ++r) {
    if (states_[r] == State::kLeaving) out.push_back(r);
  }
  return out;
}

int32_t Membership::size() const {
  return static_cast<int32_t>(std::count_if(states_.begin(), states_.end(),
                                            [](State s) { return s != State::kParked && s != State::kLeaving; }));
}

int32_t Membership::running() const {
  return static_cast<int32_t>(
      std::count_if(states_.begin(), states_.end(), [](State s) { return s != State::kParked; }));
}

std::string Membership::Describe(const MembershipView& v) const {
  return absl::StrCat("membership ", v.epoch, ": ranks ", RankRanges(v.ranks), " (", v.reason, ")");
}

Membership::Decision Membership::Advance(std::vector<int32_t> ranks, const std::string& reason,
                                         const std::vector<int32_t>& told) {
  if (batching()) {
    if (!batch_.changed) batch_.base = view_.ranks;  // what the members hold
    view_.ranks = std::move(ranks);
    batch_.changed = true;
    if (!reason.empty()) batch_.other.push_back(reason);
    batch_.told.insert(batch_.told.end(), told.begin(), told.end());
    return {};
  }
  MembershipView next;
  next.epoch = view_.epoch + 1;
  next.ranks = std::move(ranks);
  next.reason = reason;
  if (auto store = stores_.find(next.ranks.front()); store != stores_.end()) {
    next.store_addr = store->second.first;
    next.store_port = store->second.second;
  }
  Decision d;
  if (formed()) d.delta = MembershipDelta::Between(view_, next);
  view_ = next;
  d.send = view_;
  d.to = view_.ranks;
  d.to.insert(d.to.end(), told.begin(), told.end());
  d.event = Describe(view_);
  return d;
}

void Membership::BeginBatch() { ++batch_.depth; }

Membership::Decision Membership::EndBatch() {
  if (batch_.depth == 0 || --batch_.depth > 0) return {};
  Batch b = std::move(batch_);
  batch_ = Batch{};
  if (!b.changed || b.failed || !formed()) return {};
  std::vector<std::string> parts;
  if (!b.losses.empty()) parts.push_back(LossReason(b.losses));
  parts.insert(parts.end(), b.other.begin(), b.other.end());
  std::vector<int32_t> ranks = std::move(view_.ranks);
  view_.ranks = std::move(b.base);  // the epoch the members hold, for the delta
  return Advance(std::move(ranks), absl::StrJoin(parts, "; "), b.told);
}

std::string Membership::LossReason(const std::vector<Loss>& losses) {
  std::vector<std::string> parts;
  for (const Loss& l : losses) {
    const bool one = l.ranks.size() == 1;
    std::string part = absl::StrCat(one ? "rank " : "ranks ", RankRanges(l.ranks), " lost: ", l.why);
    if (!l.with.empty()) {
      const bool one_with = l.with.size() == 1;
      absl::StrAppend(&part, "; ", one_with ? "rank " : "ranks ", RankRanges(l.with), " of ",
                      one ? "its shard group" : "their shard groups", one_with ? " leaves" : " leave", " with ",
                      one ? "it" : "them");
    }
    parts.push_back(std::move(part));
  }
  return absl::StrJoin(parts, "; ");
}

void Membership::OnStreamLost(int32_t rank) {
  if (formed() && rank >= 0 && rank < world_size_ && states_[rank] == State::kMember) {
    stream_lost_at_.emplace(rank, clock_->SteadyNow());
  }
}

std::vector<int32_t> Membership::StreamsLost() const {
  std::vector<int32_t> out;
  const auto now = clock_->SteadyNow();
  for (const auto& [rank, since] : stream_lost_at_) {
    if (now - since > kStreamLossGrace) out.push_back(rank);
  }
  return out;
}

Membership::Decision Membership::OnHello(int32_t rank, const std::string& store_addr, int32_t store_port) {
  if (rank < 0 || rank >= world_size_) return {};
  stores_[rank] = {store_addr, store_port};
  stream_lost_at_.erase(rank);
  State& s = states_[rank];
  if (!formed()) {
    if (s == State::kLaunched) s = State::kConnected;
    return Form();
  }
  switch (s) {
    case State::kMember: {
      // A reconnection: it may have missed the current membership.
      Decision d;
      d.send = view_;
      d.to = {rank};
      return d;
    }
    case State::kHealing: ready_.insert(rank); return JoinWhenReady();
    case State::kLost:  // the old process, about to end: it is not taken back
    case State::kLaunched:
    case State::kConnected:
    case State::kLeaving:
    case State::kParked: return {};
  }
  return {};
}

Membership::Decision Membership::JoinWhenReady() {
  for (int32_t r = 0; r < world_size_; ++r) {
    if (states_[r] == State::kHealing && !ready_.count(r)) {  // another replacement is on its way
      if (!first_ready_at_) first_ready_at_ = clock_->SteadyNow();
      return {};
    }
  }
  first_ready_at_.reset();
  return JoinReady();
}

Membership::Decision Membership::OnPass() {
  if (!first_ready_at_ || clock_->SteadyNow() - *first_ready_at_ < kJoinWait) return {};
  first_ready_at_.reset();
  Decision d = JoinReady();
  if (!ready_.empty()) first_ready_at_ = clock_->SteadyNow();  // waiting for their shard-mates
  return d;
}

Membership::Decision Membership::JoinReady() {
  std::vector<int32_t> joined;
  bool grown = false;
  for (int32_t first = 0; first < world_size_; first += unit_) {
    const std::vector<int32_t> replica = ReplicaOf(first);
    if (!std::all_of(replica.begin(), replica.end(),
                     [&](int32_t r) { return states_[r] == State::kHealing && ready_.count(r); })) {
      continue;
    }
    for (int32_t r : replica) {
      states_[r] = State::kMember;
      ready_.erase(r);
      grown |= growing_.erase(r) > 0;
      joined.push_back(r);
    }
  }
  if (joined.empty()) return {};
  std::vector<int32_t> ranks = view_.ranks;
  ranks.insert(ranks.end(), joined.begin(), joined.end());
  const bool one = joined.size() == 1;
  return Advance(std::move(ranks), absl::StrCat(one ? "rank " : "ranks ", RankRanges(joined), " joined: ",
                                                grown ? "the job grows"
                                                : one ? "its replacement connected"
                                                      : "their replacements connected"));
}

Membership::Decision Membership::OnLost(int32_t rank, const std::string& why) {
  if (!formed() || rank < 0 || rank >= world_size_ || states_[rank] != State::kMember) return {};
  // The replica's members go together: its other ranks are told and end.
  std::vector<int32_t> out;
  for (int32_t r : ReplicaOf(rank)) {
    if (states_[r] == State::kMember) out.push_back(r);
  }
  const auto now = clock_->SteadyNow();
  for (int32_t r : out) {
    states_[r] = State::kLost;
    stream_lost_at_.erase(r);
    lost_at_.emplace(r, now);  // a replacement lost again keeps the first loss
  }
  std::vector<int32_t> left;
  for (int32_t r : view_.ranks) {
    if (std::find(out.begin(), out.end(), r) == out.end()) left.push_back(r);
  }
  std::vector<int32_t> with;
  for (int32_t r : out) {
    if (r != rank) with.push_back(r);
  }
  // In a batch, the losses so far with the same reason are one.
  std::vector<Loss> losses = batching() ? batch_.losses : std::vector<Loss>{};
  auto same = std::find_if(losses.begin(), losses.end(), [&](const Loss& l) { return l.why == why; });
  if (same == losses.end()) {
    losses.push_back(Loss{why, {rank}, with});
  } else {
    same->ranks.push_back(rank);
    same->with.insert(same->with.end(), with.begin(), with.end());
  }
  const std::string reason = LossReason(losses);
  const size_t replicas = left.size() / unit_;
  if (static_cast<int32_t>(replicas) < min_replicas_) {
    Decision d;
    d.fail = true;
    d.failure = absl::StrCat(reason, "; ", replicas, " live replica", replicas == 1 ? "" : "s",
                             " left, fewer than fault_tolerance.min_replicas (", min_replicas_, ")");
    batch_.failed = batching();
    return d;
  }
  if (batching()) {
    batch_.losses = std::move(losses);
    return Advance(std::move(left), "", with);  // told, they end
  }
  return Advance(std::move(left), reason, with);  // told, they end
}

Membership::Decision Membership::Form() {
  std::vector<int32_t> ranks;
  for (int32_t r = 0; r < world_size_; ++r) {
    if (states_[r] == State::kParked || states_[r] == State::kLeaving) continue;
    if (states_[r] != State::kConnected) return {};
    ranks.push_back(r);
  }
  if (ranks.empty()) return {};
  for (int32_t r : ranks) states_[r] = State::kMember;
  const int32_t n = static_cast<int32_t>(ranks.size());
  return Advance(std::move(ranks), n == world_size_ ? (n == 1 ? std::string("its one rank connected")
                                                              : absl::StrCat("all ", n, " ranks connected"))
                                                    : absl::StrCat(n, " of ", world_size_, " ranks connected"));
}

Membership Membership::Adopting(int32_t world_size, int32_t min_replicas, const TimeSource* clock, int32_t unit) {
  Membership m(world_size, min_replicas, clock, 0, unit);
  m.adopting_ = true;
  return m;
}

Membership::Decision Membership::OnReattach(int32_t rank, const std::string& store_addr, int32_t store_port,
                                            const MembershipView& held) {
  if (!adopting_ || rank < 0 || rank >= world_size_ || states_[rank] != State::kLaunched) return {};
  stores_[rank] = {store_addr, store_port};
  held_[rank] = held;
  states_[rank] = State::kConnected;
  return TakeOn();
}

Membership::Decision Membership::OnGone(int32_t rank) {
  if (!adopting_ || rank < 0 || rank >= world_size_) return {};
  if (states_[rank] != State::kLaunched && states_[rank] != State::kConnected) return {};
  states_[rank] = State::kLost;  // a rank that reattached and ended before the take-on too
  held_.erase(rank);
  gone_.insert(rank);
  return TakeOn();
}

Membership::Decision Membership::TakeOn() {
  if (std::any_of(states_.begin(), states_.end(), [](State s) { return s == State::kLaunched; })) return {};
  adopting_ = false;
  const MembershipView* newest = nullptr;
  for (const auto& [rank, view] : held_) {
    if (view.epoch > 0 && (newest == nullptr || view.epoch > newest->epoch)) newest = &view;
  }
  // What the launcher saw of a rank gone meanwhile says little more than
  // that it is not running: the event names the ranks.
  const std::string while_away =
      gone_.empty() ? ""
                    : absl::StrCat(gone_.size() == 1 ? "; rank " : "; ranks ", RankRanges({gone_.begin(), gone_.end()}),
                                   " ended while it was away");
  Decision d;
  if (newest == nullptr) {  // the group had not formed
    if (gone_.empty()) return Form();
    d.fail = true;
    d.failure = absl::StrCat("the coordinator restarted before the group formed", while_away);
    return d;
  }
  view_ = *newest;
  auto in_view = [&](int32_t r) { return std::find(view_.ranks.begin(), view_.ranks.end(), r) != view_.ranks.end(); };
  // Whole replicas only: a member whose replica lost a rank leaves (out),
  // a joining rank whose replica lost one waits for its replacement.
  auto whole = [&](int32_t r, bool member) {
    const std::vector<int32_t> replica = ReplicaOf(r);
    return std::all_of(replica.begin(), replica.end(),
                       [&](int32_t q) { return states_[q] == State::kConnected && in_view(q) == member; });
  };
  std::vector<int32_t> members, joining, out, waiting;
  for (int32_t r : view_.ranks) {
    if (r < 0 || r >= world_size_ || states_[r] != State::kConnected) continue;
    (whole(r, true) ? members : out).push_back(r);
  }
  for (int32_t r = 0; r < world_size_; ++r) {
    if (states_[r] != State::kConnected || in_view(r)) continue;
    (whole(r, false) ? joining : waiting).push_back(r);
  }
  const size_t replicas = members.size() / unit_;
  if (static_cast<int32_t>(replicas) < min_replicas_) {
    d.fail = true;
    d.failure = absl::StrCat("the coordinator restarted: ", replicas, " live replica", replicas == 1 ? "" : "s",
                             " of membership ", view_.epoch, " reattached, fewer than fault_tolerance.min_replicas (",
                             min_replicas_, ")", while_away);
    return d;
  }
  const auto now = clock_->SteadyNow();
  for (int32_t r : members) states_[r] = State::kMember;
  for (int32_t r : joining) states_[r] = State::kMember;
  for (int32_t r : out) {
    states_[r] = State::kLost;
    lost_at_.emplace(r, now);
  }
  for (int32_t r : waiting) {
    states_[r] = State::kHealing;
    ready_.insert(r);
  }
  if (joining.empty() && out.empty() && members == view_.ranks) {
    // The group is as it was: the members that missed its membership get it.
    d.send = view_;
    d.to = members;
    d.event = absl::StrCat("the coordinator restarted: ", Describe(view_), " taken on");
  } else {
    std::vector<int32_t> ranks = members;
    ranks.insert(ranks.end(), joining.begin(), joining.end());
    // Told, they end (their shard group lost a rank).
    d = Advance(std::move(ranks), absl::StrCat("the coordinator restarted", while_away), out);
  }
  for (int32_t rank : gone_) {
    states_[rank] = State::kHealing;
    lost_at_.emplace(rank, now);
    d.launch.push_back(rank);
  }
  return d;
}

Membership::Decision Membership::Resize(int32_t n, const std::string& why) {
  n = std::clamp(n, 1, world_size_);
  n = std::max(unit_, n / unit_ * unit_);  // whole replicas
  std::vector<int32_t> launch, leave, kill;
  for (int32_t r = 0; r < n; ++r) {
    if (states_[r] != State::kParked) continue;
    states_[r] = formed() ? State::kHealing : State::kLaunched;
    failed_replacements_.erase(r);
    if (formed()) growing_.insert(r);
    launch.push_back(r);
  }
  for (int32_t r = n; r < world_size_; ++r) {
    State& s = states_[r];
    switch (s) {
      case State::kMember: leave.push_back(r); break;
      case State::kHealing:
      case State::kLaunched:
      case State::kConnected: kill.push_back(r); break;
      case State::kLost: break;  // its process is ending: parked then, not replaced
      case State::kLeaving:
      case State::kParked: continue;
    }
    s = State::kLeaving;
    lost_at_.erase(r);
    stream_lost_at_.erase(r);
    growing_.erase(r);
    ready_.erase(r);
  }
  Decision d;
  if (!leave.empty() && formed()) {
    std::vector<int32_t> ranks;
    for (int32_t r : view_.ranks) {
      if (states_[r] == State::kMember) ranks.push_back(r);
    }
    d = Advance(std::move(ranks),
                absl::StrCat(leave.size() == 1 ? "rank " : "ranks ", RankRanges(leave),
                             leave.size() == 1 ? " leaves: " : " leave: ", why),
                leave);  // told, they end
  } else if (!formed()) {
    d = Form();  // the ranks left out may be all it waited for
  }
  if (!launch.empty()) {
    d.event = absl::StrCat(d.event.empty() ? "" : d.event + "; ", "growing to ", n, " ranks (", why,
                           "): launching rank", launch.size() == 1 ? " " : "s ", RankRanges(launch));
  }
  d.launch = std::move(launch);
  d.kill = std::move(kill);
  return d;
}

Membership::Decision Membership::OnExit(int32_t rank, const std::string& why) {
  if (rank < 0 || rank >= world_size_) return {};
  const State before = states_[rank];
  ready_.erase(rank);  // a replacement that said hello and ended: its replica waits for the next one
  if (before == State::kLeaving) {
    states_[rank] = State::kParked;
    Decision d;
    d.parked = rank;
    d.event = absl::StrCat("rank ", rank, " left (", why, ")");
    if (!formed()) {
      Decision f = Form();
      f.parked = rank;
      f.event = f.event.empty() ? d.event : absl::StrCat(d.event, "; ", f.event);
      return f;
    }
    return d;
  }
  if (!formed() || before == State::kParked) return {};
  if (before == State::kLaunched || before == State::kConnected) return {};
  // A replacement that ended before it committed a step (still healing, or
  // a member with its heal pending) counts against the rank: a crash loop
  // ends there.
  const bool replacement_failed = before == State::kHealing || (before == State::kMember && lost_at_.count(rank));
  Decision d;
  if (before == State::kMember) {
    d = OnLost(rank, why);
    if (d.fail) return d;
  }
  if (replacement_failed && ++failed_replacements_[rank] >= kMaxFailedReplacements) {
    d.send.reset();
    d.to.clear();
    d.event.clear();
    d.fail = true;
    batch_.failed = batching();
    d.failure = absl::StrCat("rank ", rank, ": ", kMaxFailedReplacements,
                             " replacements in a row ended before they committed a step (the last: ", why, ")");
    return d;
  }
  states_[rank] = State::kHealing;
  d.launch = {rank};
  return d;
}

Membership::Decision Membership::OnReport(int32_t rank, const ReplicaReport& report) {
  if (rank < 0 || rank >= world_size_ || states_[rank] != State::kMember) return {};
  Decision d;
  switch (report.kind) {
    case ReplicaReport::Kind::kGroupBroken:
      // The death it saw is reported by the launcher or the stream; a rank
      // that missed a newer membership gets it again.
      if (report.epoch < view_.epoch) {
        d.send = view_;
        d.to = {rank};
      }
      return d;
    case ReplicaReport::Kind::kCommitted: {
      if (report.epoch != view_.epoch) return d;
      failed_replacements_.erase(rank);
      auto lost = lost_at_.find(rank);
      if (lost == lost_at_.end()) return d;
      d.healed_rank = rank;
      d.heal_seconds = std::chrono::duration<double>(clock_->SteadyNow() - lost->second).count();
      lost_at_.erase(lost);
      d.event = absl::StrFormat("rank %d healed in %.1f s (%s)", rank, d.heal_seconds,
                                report.healed ? absl::StrFormat("%.1f MB from a peer", report.heal_bytes / 1e6)
                                              : std::string("no state to take"));
      return d;
    }
    case ReplicaReport::Kind::kLeft: return d;
  }
  return d;
}

}  // namespace trainyard
