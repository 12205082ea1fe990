#include "server/identities.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/secrets.h"

namespace trainyard {

Identities::Identities(std::string admin_token, std::string policy_file, std::vector<std::string> allowed_roots)
    : admin_token_(std::move(admin_token)),
      policy_file_(std::move(policy_file)),
      allowed_roots_(std::move(allowed_roots)),
      policy_(std::make_shared<Policy>()) {}

absl::Status Identities::Reload() {
  if (policy_file_.empty()) return absl::OkStatus();
  absl::StatusOr<Policy> p = ReadPolicy(policy_file_);
  if (!p.ok()) return p.status();
  absl::MutexLock lock(&mu_);
  policy_ = std::make_shared<const Policy>(*std::move(p));
  return absl::OkStatus();
}

std::shared_ptr<const Policy> Identities::policy() const {
  absl::MutexLock lock(&mu_);
  return policy_;
}

Caller Identities::CallerOf(const PolicyUser& user) const {
  Caller c{user.name, user.groups, user.role == Role::kAdmin, user.roots};
  if (c.roots.empty()) {
    for (const std::string& root : allowed_roots_)
      c.roots.push_back(absl::StrReplaceAll(root, {{"{user}", user.name}}));
  }
  return c;
}

absl::StatusOr<Caller> Identities::Authenticate(const std::string& authorization,
                                                const std::string& cert_common_name) const {
  if (open()) return Caller{};
  const std::shared_ptr<const Policy> policy = this->policy();
  if (authorization.empty()) {
    if (!cert_common_name.empty()) {
      if (const PolicyUser* u = policy->User(cert_common_name)) return CallerOf(*u);
    }
    return absl::UnauthenticatedError(
        "this server needs a token: authorization: Bearer <token> (trainctl --token-file or TRAINYARD_TOKEN)");
  }
  constexpr std::string_view kBearer = "Bearer ";
  if (authorization.rfind(kBearer, 0) != 0) {
    return absl::UnauthenticatedError("the authorization header must be 'Bearer <token>'");
  }
  const std::string token = authorization.substr(kBearer.size());
  if (token.empty()) return absl::UnauthenticatedError("the bearer token is empty");
  if (!admin_token_.empty() && ConstantTimeEquals(token, admin_token_)) return Caller{"", {}, /*admin=*/true};
  if (const PolicyUser* u = policy->UserOfToken(token)) return CallerOf(*u);
  return absl::UnauthenticatedError("invalid token");
}

}  // namespace trainyard
