// UnixAccount: a local Unix account a job's processes run as (the policy's
// `unix_user`), resolved once by name: its uid, primary gid, supplementary
// groups and home. And whether this process may start processes as another
// account at all.
#ifndef TRAINYARD_COMMON_UNIX_ACCOUNT_H_
#define TRAINYARD_COMMON_UNIX_ACCOUNT_H_

#include <sys/types.h>

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace trainyard {

struct UnixAccount {
  std::string name;
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;  // supplementary, the primary group among them
  std::string home;
  std::string shell;
};

// The account of that name (getpwnam_r, getgrouplist). NotFound names it
// when there is none; uid 0 is refused (a job never runs as root).
absl::StatusOr<UnixAccount> LookupUnixAccount(std::string_view name);

// OK when this process may start children as another account: it runs as
// root, or holds CAP_SETUID, CAP_SETGID and CAP_CHOWN (the job's files are
// given to its account). Otherwise FailedPrecondition says what is missing.
absl::Status CanSwitchAccounts();

// Gives `fd` (a file or directory this process just made) to `account`;
// nothing when `account` is null.
absl::Status GiveTo(int fd, const UnixAccount* account, std::string_view what);

}  // namespace trainyard

#endif  // TRAINYARD_COMMON_UNIX_ACCOUNT_H_
