#include "server/auth/identities.h"

#include <cctype>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/secrets.h"

namespace trainyard {

Identities::Identities(std::string admin_token, std::string policy_file, std::vector<std::string> allowed_roots)
    : admin_token_(std::move(admin_token)),
      policy_file_(std::move(policy_file)),
      allowed_roots_(std::move(allowed_roots)),
      policy_(std::make_shared<Policy>()) {}

namespace {

// The first certificate of a PEM text, whitespace removed: a chain file and
// the one certificate TLS reports compare equal.
std::string FirstCertificate(const std::string& pem) {
  constexpr std::string_view kEnd = "-----END CERTIFICATE-----";
  const size_t begin = pem.find("-----BEGIN CERTIFICATE-----");
  const size_t end = pem.find(kEnd, begin == std::string::npos ? 0 : begin);
  if (begin == std::string::npos || end == std::string::npos) return "";
  std::string out;
  for (size_t i = begin; i < end + kEnd.size(); ++i) {
    if (!std::isspace(static_cast<unsigned char>(pem[i]))) out.push_back(pem[i]);
  }
  return out;
}

}  // namespace

void Identities::RequireClientCertificates(std::string server_cert_pem) {
  require_client_certificates_ = true;
  server_cert_pem_ = FirstCertificate(server_cert_pem);
}

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

Caller Identities::CallerOf(const PolicyUser& user, const Policy& policy) const {
  const bool admin = user.role == Role::kAdmin;
  Caller c{user.name, user.groups, admin, user.roots,
           user.unix_user.empty() && !admin ? policy.default_unix_user : user.unix_user};
  if (c.roots.empty()) {
    for (const std::string& root : allowed_roots_)
      c.roots.push_back(absl::StrReplaceAll(root, {{"{user}", user.name}}));
  }
  return c;
}

absl::StatusOr<Caller> Identities::Authenticate(const std::string& authorization, const PeerCertificate& cert) const {
  if (require_client_certificates_) {
    if (!cert.verified) {
      return absl::UnauthenticatedError(
          "this server requires a client certificate signed by its --tls-client-ca (mutual TLS): trainctl "
          "--tls-cert/--tls-key");
    }
    if (!server_cert_pem_.empty() && FirstCertificate(cert.pem) == server_cert_pem_) {
      return absl::UnauthenticatedError("the client certificate is the server's own: use a certificate of your own");
    }
  }
  if (open()) return Caller{};
  const std::shared_ptr<const Policy> policy = this->policy();
  if (authorization.empty()) {
    if (cert.verified) {
      if (const PolicyUser* u = policy->UserOfSubject(cert.subject)) return CallerOf(*u, *policy);
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
  if (const PolicyUser* u = policy->UserOfToken(token)) return CallerOf(*u, *policy);
  return absl::UnauthenticatedError("invalid token");
}

absl::StatusOr<Caller> Identities::Current(const Caller& stored) const {
  if (open()) return Caller{};
  if (stored.user.empty()) {
    if (stored.admin && !admin_token_.empty()) return Caller{"", {}, /*admin=*/true};
    return absl::PermissionDeniedError(
        stored.admin ? "the admin token it was submitted with is no longer the server's (--auth-token-file)"
                     : "it was submitted without a user, and this server now has users");
  }
  const std::shared_ptr<const Policy> policy = this->policy();
  const PolicyUser* u = policy->User(stored.user);
  if (u == nullptr) {
    return absl::PermissionDeniedError(absl::StrCat("user ", stored.user, " is no longer in the server's policy"));
  }
  return CallerOf(*u, *policy);
}

}  // namespace trainyard
