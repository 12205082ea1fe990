// The server's policy file (--policy-file): who may call it (users, their
// groups and roles, each known by the SHA-256 of a token), the priority
// classes jobs name, and the quotas of users and groups. Torch-free and
// gRPC-free: parsed and checked here, applied by the coordinator.
//
//   users:
//     - {name: alice, token_sha256: "<64 hex digits>", groups: [vision], role: user}
//     - {name: ops, token_sha256: "<64 hex digits>", role: admin}
//   priority_classes: {low: 0, normal: 100, high: 1000}
//   default_priority_class: normal          # optional; "normal" when present
//   quotas:
//     users: {alice: {slots: 8, gpus: 0, queued_jobs: 100, max_priority_class: normal}}
//     groups: {vision: {slots: 16}}
//   group_visibility: true                  # members see each other's jobs
//   notify: {urls: ["https://hooks.example/ops"], on: [FAILED]}  # every job's
// A user may also have `notify: {urls, on}`: webhooks of all their jobs,
// beside those of the policy's `notify` and of each job's spec.
// A user may also list `roots: [DIR...]`: where their jobs read and write;
// `unix_user: NAME`: the local account their jobs run as (each rank, its
// script, the files they write); `tls_subject: "CN=..."`: the client
// certificate subject that names them under mutual TLS. `shared_account:
// true` lets users without a unix_user run scripts as the server's account.
#ifndef TRAINYARD_COMMON_POLICY_H_
#define TRAINYARD_COMMON_POLICY_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/spec/job_spec.h"
#include "common/unix_account.h"

namespace trainyard {

enum class Role { kUser, kAdmin };

struct PolicyUser {
  std::string name;
  std::string token_sha256;  // lower-case hex, 64 digits
  std::vector<std::string> groups;
  Role role = Role::kUser;
  // Where this user's jobs may read and write (checkpoint.project_dir,
  // init_from, resume sources...); empty: the server's --allowed-root
  // directories with {user} replaced by the name.
  std::vector<std::string> roots;
  // The Unix account its jobs run as ("": the server's own), resolved when
  // the policy is read (ReadPolicy): `account` holds its ids.
  std::string unix_user;
  std::optional<UnixAccount> account;
  // The subject of a client certificate that is this user, as OpenSSL's
  // one-line form with RFC 2253 order ("CN=alice,O=Example"); "": none.
  std::string tls_subject;
  // Webhooks called for every job of this user (as a spec's `notify`).
  NotifySpec notify;
};

// Limits on what is in use or waiting at once; unset: no limit.
struct Quota {
  std::optional<int64_t> slots, gpus, queued_jobs;
  // The highest priority class its jobs may name ("": any).
  std::string max_priority_class;
};

struct Policy {
  std::vector<PolicyUser> users;
  std::map<std::string, int64_t> priority_classes;  // name → priority (higher first)
  std::string default_priority_class;               // "" when there are no classes
  std::map<std::string, Quota> user_quotas, group_quotas;
  // Members of a group may see (not act on) each other's jobs.
  bool group_visibility = false;
  // Users without a unix_user may run scripts, as the server's own account:
  // each such script can read every other such user's data.
  bool shared_account = false;
  // The account the jobs of users without a unix_user run as (not admins):
  // an unprivileged one of the operator's choosing. "": none.
  std::string default_unix_user;
  // Webhooks called for every job.
  NotifySpec notify;

  // Whether any user runs as an account of their own.
  bool SwitchesAccounts() const;
  // The user whose client certificate has this subject; null when none.
  const PolicyUser* UserOfSubject(std::string_view subject) const;
  // The user whose token this is, by its SHA-256; null when none.
  const PolicyUser* UserOfToken(std::string_view token) const;
  // The user of that name; null when none.
  const PolicyUser* User(std::string_view name) const;
  // The priority of a class name ("" : the default class); nullopt for an
  // unknown name.
  std::optional<int64_t> Priority(std::string_view class_name) const;
};

// Parses a policy file's text. `source` names it in errors. Refused, by
// path (users[1].token_sha256, quotas.users.bob, ...): unknown keys, a
// token hash that is not 64 hex digits, two users with one name or one
// token, an unknown role, a quota for a user or group nobody is in, a
// negative limit, a default class that is not a class, the hash of an
// empty token; and a text that is empty (or only comments) or does not end
// with a newline (a file cut short).
absl::StatusOr<Policy> ParsePolicy(std::string_view yaml_text, std::string_view source);

// Reads (ReadBoundedFile of common/paths.h: a regular file of at most
// kMaxPolicyBytes) and parses FILE, then resolves each unix_user to its
// account: refused, naming the field, when there is no such account, and
// when this process cannot start processes as other accounts
// (CanSwitchAccounts) while a user names one.
inline constexpr size_t kMaxPolicyBytes = 16 << 20;
absl::StatusOr<Policy> ReadPolicy(const std::string& path);

// The lower-case hex SHA-256 of `text` (what token_sha256 holds).
std::string Sha256Hex(std::string_view text);

}  // namespace trainyard

#endif  // TRAINYARD_COMMON_POLICY_H_
