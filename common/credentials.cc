#include "common/credentials.h"

#include <grpcpp/client_context.h>

#include "absl/strings/str_cat.h"
#include "common/paths.h"

namespace trainyard {

void AddWorkerCredentials(grpc::ClientContext* ctx, const std::string& job_id, const std::string& token) {
  ctx->AddMetadata(kWorkerJobMetadata, job_id);
  ctx->AddMetadata(kWorkerTokenMetadata, token);
}

std::shared_ptr<grpc::ChannelCredentials> ClientCredentials(const std::string& ca_pem, const std::string& cert_pem,
                                                            const std::string& key_pem) {
  if (ca_pem.empty()) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = ca_pem;
  ssl.pem_cert_chain = cert_pem;
  ssl.pem_private_key = key_pem;
  return grpc::SslCredentials(ssl);
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentials(const std::string& tls_cert_file,
                                                                           const std::string& tls_key_file,
                                                                           const std::string& tls_client_ca_file) {
  if (tls_cert_file.empty() && tls_key_file.empty()) {
    if (!tls_client_ca_file.empty()) {
      return absl::FailedPreconditionError("--tls-client-ca needs --tls-cert and --tls-key");
    }
    return grpc::InsecureServerCredentials();
  }
  grpc::SslServerCredentialsOptions ssl;
  grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
  if (!ReadFileToString(tls_cert_file, &pair.cert_chain) || !ReadFileToString(tls_key_file, &pair.private_key)) {
    return absl::FailedPreconditionError("--tls-cert and --tls-key must both name readable PEM files");
  }
  ssl.pem_key_cert_pairs.push_back(pair);
  if (!tls_client_ca_file.empty()) {
    if (!ReadFileToString(tls_client_ca_file, &ssl.pem_root_certs)) {
      return absl::FailedPreconditionError(absl::StrCat("--tls-client-ca ", tls_client_ca_file, ": cannot read it"));
    }
    // A certificate presented is verified; none may be presented (the
    // workers, known by their job's token): the JobService refuses a call
    // without one (Identities::RequireClientCertificates).
    ssl.client_certificate_request = GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  return grpc::SslServerCredentials(ssl);
}

}  // namespace trainyard
