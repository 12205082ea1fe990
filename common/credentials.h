// gRPC transport credentials of the three programs: the server's (TLS,
// optionally requiring client certificates) and a client's (trainctl and
// trainyard-worker: plain text, TLS, or mutual TLS).
#ifndef TRAINYARD_COMMON_CREDENTIALS_H_
#define TRAINYARD_COMMON_CREDENTIALS_H_

#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"

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

}  // namespace trainyard

#endif  // TRAINYARD_COMMON_CREDENTIALS_H_
