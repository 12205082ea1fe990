#include "server/scheduling/fair_share.h"

#include <algorithm>
#include <cmath>

namespace trainyard {

double FairShare::UsageAt(const Owner& o, Time now) const {
  if (now <= o.updated) return o.usage;
  const double h = std::max(1e-3, std::chrono::duration<double>(half_life_).count());
  const double dt = std::chrono::duration<double>(now - o.updated).count();
  const double decay = std::exp2(-dt / h);
  // Exact for a constant rate over dt: ∫ rate · 2^(-(dt-t)/h) dt.
  return o.usage * decay + o.ranks_running * (h / std::log(2.0)) * (1 - decay);
}

void FairShare::Accrue(Owner& o, Time now) const {
  o.usage = UsageAt(o, now);
  o.updated = std::max(o.updated, now);
}

void FairShare::Started(const std::string& owner, int ranks, Time now) {
  Owner& o = owners_[owner];
  Accrue(o, now);
  o.ranks_running += ranks;
}

void FairShare::Stopped(const std::string& owner, int ranks, Time now) {
  Owner& o = owners_[owner];
  Accrue(o, now);
  o.ranks_running -= ranks;
}

double FairShare::UsageAt(const std::string& owner, Time now) const {
  auto it = owners_.find(owner);
  return it == owners_.end() ? 0.0 : UsageAt(it->second, now);
}

std::map<std::string, double> FairShare::Usage(Time now) const {
  std::map<std::string, double> out;
  for (const auto& [owner, o] : owners_) out[owner] = UsageAt(o, now);
  return out;
}

}  // namespace trainyard
