#include "server/health/hang_diagnosis.h"

#include <algorithm>
#include <cstdio>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace trainyard {
namespace {

// One rank's collectives of one group, as far as its ring reaches.
struct RankInGroup {
  const CollectiveRecord* last = nullptr;     // the highest number it started
  const CollectiveRecord* waiting = nullptr;  // its oldest unfinished one
  int64_t last_seq() const { return last != nullptr ? last->seq : 0; }
};

// A rank that has not started collective `seq` of `group`, which `started`
// ranks have.
struct Lag {
  int32_t rank = 0;
  std::string group;
  const CollectiveRecord* awaited = nullptr;  // one started copy of it
  std::vector<int32_t> started;
};

std::string Size(int64_t bytes) {
  char buf[32];
  if (bytes >= (int64_t{1} << 20)) {
    std::snprintf(buf, sizeof buf, "%.1f MB", static_cast<double>(bytes) / (1 << 20));
  } else if (bytes >= 1024) {
    std::snprintf(buf, sizeof buf, "%.1f kB", static_cast<double>(bytes) / 1024);
  } else {
    std::snprintf(buf, sizeof buf, "%lld B", static_cast<long long>(bytes));
  }
  return buf;
}

std::string Ago(int64_t since_micros, int64_t now_micros) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", std::max<int64_t>(0, now_micros - since_micros) / 1e6);
  return buf;
}

std::string Ranks(const std::vector<int32_t>& ranks) {
  return absl::StrCat(ranks.size() == 1 ? "rank " : "ranks ", absl::StrJoin(ranks, ", "));
}

std::string Describe(const CollectiveRecord& c) {
  return absl::StrCat("collective #", c.seq, " of group ", c.group, " (", c.op, ", ", Size(c.bytes), ")");
}

std::string Phase(const FlightRecord& r, int64_t now) {
  return absl::StrCat("in ", r.phase, " after step ", r.step == kStepUnknown ? "-" : absl::StrCat(r.step), " for ",
                      Ago(r.phase_since_unix_micros, now));
}

// The first collective (lowest number, then group) whose copies on the
// ranks differ in op or size, with the ranks outside the largest agreeing
// set when that set is a majority.
std::string FindMismatch(const std::map<int32_t, FlightRecord>& answers, std::vector<int32_t>* odd_ranks) {
  // (seq, group) -> (op, bytes) -> ranks
  std::map<std::pair<int64_t, std::string>, std::map<std::pair<std::string, int64_t>, std::vector<int32_t>>> seen;
  for (const auto& [rank, record] : answers) {
    for (const CollectiveRecord& c : record.collectives) {
      // An all-to-all's ranks may send different amounts: only its kind counts.
      const int64_t bytes = c.op.find("alltoall") != std::string::npos ? -1 : c.bytes;
      seen[{c.seq, c.group}][{c.op, bytes}].push_back(rank);
    }
  }
  for (const auto& [where, kinds] : seen) {
    if (kinds.size() < 2) continue;
    size_t total = 0, largest = 0;
    const std::pair<const std::pair<std::string, int64_t>, std::vector<int32_t>>* majority = nullptr;
    std::vector<std::string> parts;
    std::set<std::string> ops;
    for (const auto& entry : kinds) {
      const auto& [kind, ranks] = entry;
      total += ranks.size();
      ops.insert(kind.first);
      if (ranks.size() > largest) {
        largest = ranks.size();
        majority = &entry;
      }
      parts.push_back(absl::StrCat(kind.first, kind.second >= 0 ? absl::StrCat(" (", Size(kind.second), ")") : "",
                                   " on ", Ranks(ranks)));
    }
    if (2 * largest > total) {
      for (const auto& entry : kinds) {
        if (&entry != majority) odd_ranks->insert(odd_ranks->end(), entry.second.begin(), entry.second.end());
      }
      std::sort(odd_ranks->begin(), odd_ranks->end());
    }
    return absl::StrCat(
        "collective #", where.first, " of group ", where.second, ": ", absl::StrJoin(parts, ", "),
        ops.size() > 1 ? " (kind mismatch: a collective skipped or issued out of order)" : " (size mismatch)");
  }
  return "";
}

}  // namespace

HangDiagnosis DiagnoseHang(int32_t world_size, const std::map<int32_t, FlightRecord>& answers, int64_t now_unix_micros,
                           int64_t stuck_after_micros) {
  const int64_t now = now_unix_micros;
  HangDiagnosis d;
  for (int32_t r = 0; r < world_size; ++r) {
    if (!answers.count(r)) d.silent_ranks.push_back(r);
  }
  std::map<std::string, std::map<int32_t, RankInGroup>> groups;
  for (const auto& [rank, record] : answers) {
    groups["world"][rank];  // every rank is in the world group, even before its first collective there
    for (const CollectiveRecord& c : record.collectives) {
      RankInGroup& g = groups[c.group][rank];
      if (g.last == nullptr || c.seq > g.last->seq) g.last = &c;
      if (c.end_unix_micros == 0 && (g.waiting == nullptr || c.seq < g.waiting->seq)) g.waiting = &c;
    }
  }

  // Each rank's lag that has been awaited longest.
  std::map<int32_t, Lag> lags;
  for (const auto& [name, ranks] : groups) {
    int64_t max_seq = 0;
    for (const auto& [rank, g] : ranks) max_seq = std::max(max_seq, g.last_seq());
    for (const auto& [rank, g] : ranks) {
      if (g.last_seq() >= max_seq) continue;
      Lag lag{rank, name, nullptr, {}};
      const int64_t missing = g.last_seq() + 1;
      for (const auto& [other, og] : ranks) {
        if (og.last_seq() < missing) continue;
        lag.started.push_back(other);
        for (const CollectiveRecord& c : answers.at(other).collectives) {
          if (c.group == name && c.seq == missing &&
              (lag.awaited == nullptr || c.start_unix_micros < lag.awaited->start_unix_micros)) {
            lag.awaited = &c;
          }
        }
      }
      // Started moments ago: the others are just ahead, not waiting for it.
      if (lag.awaited != nullptr && now - lag.awaited->start_unix_micros < stuck_after_micros) continue;
      auto it = lags.find(rank);
      const auto started_at = [](const Lag& l) { return l.awaited != nullptr ? l.awaited->start_unix_micros : 0; };
      if (it == lags.end() || (lag.awaited != nullptr && started_at(lag) < started_at(it->second))) {
        lags[rank] = std::move(lag);
      }
    }
  }

  // The oldest unfinished collective among the ranks that answered.
  const CollectiveRecord* oldest_wait = nullptr;
  std::vector<int32_t> waiting;
  for (const auto& [name, ranks] : groups) {
    for (const auto& [rank, g] : ranks) {
      if (g.waiting == nullptr) continue;
      if (oldest_wait == nullptr || g.waiting->start_unix_micros < oldest_wait->start_unix_micros) {
        oldest_wait = g.waiting;
      }
    }
  }
  if (oldest_wait != nullptr) {
    for (const auto& [rank, g] : groups.at(oldest_wait->group)) {
      if (g.waiting != nullptr && g.waiting->seq == oldest_wait->seq) waiting.push_back(rank);
    }
  }

  std::vector<std::string> clauses;
  std::vector<int32_t> odd;
  d.mismatch = FindMismatch(answers, &odd);
  if (!d.mismatch.empty()) {
    clauses.push_back(absl::StrCat("the ranks' collectives do not match: ", d.mismatch));
    // Every rank may have "reached" the mismatched number: the ranks that
    // issued another collective there are to blame, not the transport.
    if (lags.empty() && d.silent_ranks.empty() && !odd.empty()) {
      d.behind_ranks = odd;
      d.verdict = absl::StrJoin(clauses, "; ");
      return d;
    }
  }
  if (!lags.empty()) {
    for (const auto& [rank, lag] : lags) {
      d.behind_ranks.push_back(rank);
      const FlightRecord& mine = answers.at(rank);
      const RankInGroup& g = groups.at(lag.group).at(rank);
      std::string c = absl::StrCat("rank ", rank, " is behind: it has not started ");
      if (lag.awaited != nullptr) {
        absl::StrAppend(&c, Describe(*lag.awaited), ", which ", Ranks(lag.started), " started ",
                        Ago(lag.awaited->start_unix_micros, now), " ago");
      } else {
        absl::StrAppend(&c, "collective #", g.last_seq() + 1, " of group ", lag.group, ", which ", Ranks(lag.started),
                        " started");
      }
      absl::StrAppend(&c, "; rank ", rank, " is ", Phase(mine, now));
      if (g.last != nullptr) {
        absl::StrAppend(&c, ", its last collective there #", g.last->seq, " (", g.last->op, ") ",
                        g.last->end_unix_micros != 0 ? absl::StrCat("ended ", Ago(g.last->end_unix_micros, now), " ago")
                                                     : std::string("has not ended"));
      }
      clauses.push_back(std::move(c));
    }
    if (!d.silent_ranks.empty()) {
      clauses.push_back(
          absl::StrCat(Ranks(d.silent_ranks), d.silent_ranks.size() == 1 ? " did" : " do", " not answer"));
    }
  } else if (!d.silent_ranks.empty()) {
    d.behind_ranks = d.silent_ranks;
    std::string c = absl::StrCat(Ranks(d.silent_ranks), d.silent_ranks.size() == 1 ? " did" : " do",
                                 " not answer (stopped, or the whole process is stuck)");
    if (oldest_wait != nullptr) {
      absl::StrAppend(&c, "; ", Ranks(waiting), waiting.size() == 1 ? " waits" : " wait", " in ",
                      Describe(*oldest_wait), ", started ", Ago(oldest_wait->start_unix_micros, now), " ago");
    } else if (!answers.empty()) {
      absl::StrAppend(&c, "; no rank that answered is in a collective");
    }
    clauses.push_back(std::move(c));
  } else if (oldest_wait != nullptr && now - oldest_wait->start_unix_micros < stuck_after_micros) {
    clauses.push_back(absl::StrCat("no rank is behind: the ranks are moving (the oldest collective in flight, ",
                                   Describe(*oldest_wait), ", started ", Ago(oldest_wait->start_unix_micros, now),
                                   " ago)"));
  } else if (oldest_wait != nullptr) {
    clauses.push_back(absl::StrCat("no rank is behind: ", Ranks(waiting), waiting.size() == 1 ? " waits" : " wait",
                                   " in ", Describe(*oldest_wait), ", started ",
                                   Ago(oldest_wait->start_unix_micros, now),
                                   " ago, and every rank has reached it (the transport is stuck, not a rank)"));
  } else {
    std::vector<std::string> phases;
    for (const auto& [rank, r] : answers) phases.push_back(absl::StrCat("rank ", rank, " ", Phase(r, now)));
    clauses.push_back(absl::StrCat("no rank is in a collective: ", absl::StrJoin(phases, ", ")));
  }
  d.verdict = absl::StrJoin(clauses, "; ");
  return d;
}

}  // namespace trainyard
