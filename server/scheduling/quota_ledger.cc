#include "server/scheduling/quota_ledger.h"

#include <utility>

namespace trainyard {
void QuotaLedger::SetQuotas(std::map<std::string, Quota> users, std::map<std::string, Quota> groups) {
  user_quotas_ = std::move(users);
  group_quotas_ = std::move(groups);
}

std::optional<QuotaLedger::Over> QuotaLedger::Check(const std::string& owner, const std::string& group, Kind kind,
                                                    int count) const {
  auto check = [&](const std::map<std::string, Quota>& quotas, const std::map<std::string, InUse>& in_use,
                   const std::string& name) -> std::optional<Over> {
    if (name.empty()) return std::nullopt;
    auto q = quotas.find(name);
    if (q == quotas.end()) return std::nullopt;
    const std::optional<int64_t> limit = kind == Kind::kGpus ? q->second.gpus : q->second.slots;
    if (!limit) return std::nullopt;
    auto u = in_use.find(name);
    const int used = u == in_use.end() ? 0 : u->second.of(kind);
    if (used + count <= *limit) return std::nullopt;
    return Over{false, used, *limit};
  };
  if (std::optional<Over> over = check(user_quotas_, users_, owner)) return over;
  std::optional<Over> over = check(group_quotas_, groups_, group);
  if (over) over->group = true;
  return over;
}

void QuotaLedger::Take(const std::string& owner, const std::string& group, Kind kind, int count) {
  if (!owner.empty()) users_[owner].of(kind) += count;
  if (!group.empty()) groups_[group].of(kind) += count;
}

void QuotaLedger::Give(const std::string& owner, const std::string& group, Kind kind, int count) {
  Take(owner, group, kind, -count);
}

}  // namespace trainyard
