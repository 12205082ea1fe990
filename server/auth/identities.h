// Identities: who may call the JobService. A server has no identities
// (anyone may do anything), one admin token (--auth-token-file), a policy
// file of users known by their tokens' SHA-256 (--policy-file), or both.
// Under mutual TLS (--tls-client-ca) every call needs a client certificate
// the CA signed (workers, which present none, are known by their job's
// token on the WorkerService instead); a certificate whose subject is a
// user's `tls_subject` names that user without a token, and the server's own
// certificate names nobody.
//
// Thread-safe: Reload swaps the policy while calls are served; a call uses
// the policy it started with.
#ifndef TRAINYARD_SERVER_AUTH_IDENTITIES_H_
#define TRAINYARD_SERVER_AUTH_IDENTITIES_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/policy.h"
#include "server/auth/caller.h"

namespace trainyard {

class Identities {
 public:
  // `admin_token`: "" for none. `policy_file`: "" for none. `allowed_roots`:
  // the server's; "{user}" in one stands for the user's name.
  Identities(std::string admin_token, std::string policy_file, std::vector<std::string> allowed_roots);

  // Mutual TLS: calls without a verified client certificate are refused, and
  // `server_cert_pem` (the server's own certificate) is refused as one.
  void RequireClientCertificates(std::string server_cert_pem);

  // Reads the policy file again (at start, and on SIGHUP); on error the
  // previous policy stays and the error names the file and field.
  absl::Status Reload();
  std::shared_ptr<const Policy> policy() const;
  // No tokens: anyone who reaches the JobService (under mutual TLS: anyone
  // with a client certificate) may do anything.
  bool open() const { return admin_token_.empty() && policy_file_.empty(); }
  bool requires_client_certificates() const { return require_client_certificates_; }

  // What TLS says of the caller's client certificate.
  struct PeerCertificate {
    bool verified = false;  // presented and signed by the client CA
    std::string subject;    // RFC 2253 one-line form
    std::string pem;
  };
  // The caller of a request with this `authorization` metadata value ("" if
  // none) and client certificate. UNAUTHENTICATED names what is wrong.
  absl::StatusOr<Caller> Authenticate(const std::string& authorization, const PeerCertificate& cert) const;
  // The rights of a caller resolved earlier (a sweep's owner, stored with
  // it) as the identities say now: a policy user's current role, groups,
  // roots and unix_user; the admin token's caller while an admin token is
  // configured; anyone's on an open server. PermissionDenied naming the user
  // when it is no longer in the policy (or the admin token is gone).
  absl::StatusOr<Caller> Current(const Caller& stored) const;

 private:
  // A non-admin user without a unix_user runs as the policy's
  // default_unix_user, if it names one.
  Caller CallerOf(const PolicyUser& user, const Policy& policy) const;

  const std::string admin_token_;
  const std::string policy_file_;
  const std::vector<std::string> allowed_roots_;
  bool require_client_certificates_ = false;
  std::string server_cert_pem_;
  mutable absl::Mutex mu_;
  std::shared_ptr<const Policy> policy_ ABSL_GUARDED_BY(mu_);
};

}  // namespace trainyard

#endif  // TRAINYARD_SERVER_AUTH_IDENTITIES_H_
