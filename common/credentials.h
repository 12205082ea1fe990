// gRPC transport credentials of the three programs: the server's (TLS,
// optionally requiring client certificates) and a client's (trainctl and
// trainyard-worker: plain text, TLS, or mutual TLS); and the metadata a
// worker's stream proves its job with.
#ifndef TRAINYARD_COMMON_CREDENTIALS_H_
#define TRAINYARD_COMMON_CREDENTIALS_H_

#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace grpc {
class ClientContext;
}  // namespace grpc

namespace trainyard {

// Plain text when `ca_pem` is empty, else TLS checked against it,
// presenting `cert_pem`/`key_pem` when given (mutual TLS).
std::shared_ptr<grpc::ChannelCredentials> ClientCredentials(const std::string& ca_pem, const std::string& cert_pem,
                                                            const std::string& key_pem);

// From the server's flags (file paths): plain text when all are empty; TLS
// with --tls-cert/--tls-key; with --tls-client-ca too, clients must present
// a certificate signed by it. Errors name the flag at fault.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentials(const std::string& tls_cert_file,
                                                                           const std::string& tls_key_file,
                                                                           const std::string& tls_client_ca_file);

// A worker's stream (WorkerService.Connect) names its job and presents the
// job's worker token in its metadata as well as in its hello, so that the
// coordinator knows whose it is when it opens, before any message is read:
// it then counts the stream against that job's budget of streams waiting to
// say hello, not its host's, which strangers on the host may fill
// (server/api/hello_guard.h). Bench/scale's simulated ranks do the same.
inline constexpr char kWorkerJobMetadata[] = "trainyard-job-id";
inline constexpr char kWorkerTokenMetadata[] = "trainyard-worker-token";
void AddWorkerCredentials(grpc::ClientContext* ctx, const std::string& job_id, const std::string& token);

}  // namespace trainyard

#endif  // TRAINYARD_COMMON_CREDENTIALS_H_
