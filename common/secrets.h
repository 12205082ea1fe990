// Secrets: the API token people present (trainctl --token-file) and the
// worker tokens the coordinator hands to each job. Every comparison of a
// presented secret goes through ConstantTimeEquals.
#ifndef TRAINYARD_COMMON_SECRETS_H_
#define TRAINYARD_COMMON_SECRETS_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace trainyard {

// `bytes` random bytes from the OS (std::random_device), as lowercase hex.
std::string RandomHex(size_t bytes);

// A new worker token: 128 random bits.
std::string NewWorkerToken();

// Equal-time comparison: the time taken does not depend on where the two
// strings differ, so a token cannot be guessed byte by byte.
bool ConstantTimeEquals(const std::string& a, const std::string& b);

// HMAC-SHA256 of `data` under `key`: 32 raw bytes.
std::string HmacSha256(const std::string& key, const std::string& data);

// The secret an attempt's ranks sign their rendezvous store's values with,
// derived from the attempt's worker token (which every rank, and no one
// else, holds): HmacSha256(token, "trainyard-rendezvous/<job>/<attempt>").
std::string RendezvousSecret(const std::string& token, const std::string& job_id, int32_t attempt);

// The token in `path` without trailing whitespace; at least 16 characters.
// Errors name `flag` (e.g. "--auth-token-file") and the path.
absl::StatusOr<std::string> ReadTokenFile(const std::string& path, const std::string& flag);

}  // namespace trainyard

#endif  // TRAINYARD_COMMON_SECRETS_H_
