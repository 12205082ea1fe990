#include "common/unix_account.h"

#include <grp.h>
#include <linux/capability.h>
#include <pwd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace trainyard {

absl::StatusOr<UnixAccount> LookupUnixAccount(std::string_view name) {
  const std::string n(name);
  if (n.empty()) return absl::InvalidArgumentError("an empty account name");
  long size = sysconf(_SC_GETPW_R_SIZE_MAX);
  std::vector<char> buf(size > 0 ? static_cast<size_t>(size) : 16384);
  passwd pw{};
  passwd* found = nullptr;
  int err = 0;
  while ((err = getpwnam_r(n.c_str(), &pw, buf.data(), buf.size(), &found)) == ERANGE) buf.resize(buf.size() * 2);
  if (err != 0) return absl::InternalError(absl::StrCat("looking up account ", n, ": ", std::strerror(err)));
  if (found == nullptr) return absl::NotFoundError(absl::StrCat("there is no Unix account named '", n, "' here"));
  if (pw.pw_uid == 0) {
    return absl::InvalidArgumentError(absl::StrCat("account '", n, "' is root (uid 0): jobs never run as root"));
  }
  UnixAccount a;
  a.name = n;
  a.uid = pw.pw_uid;
  a.gid = pw.pw_gid;
  a.home = pw.pw_dir != nullptr ? pw.pw_dir : "";
  a.shell = pw.pw_shell != nullptr ? pw.pw_shell : "";
  int count = 32;
  std::vector<gid_t> groups(static_cast<size_t>(count));
  while (getgrouplist(n.c_str(), a.gid, groups.data(), &count) < 0) groups.resize(static_cast<size_t>(count) + 32);
  groups.resize(static_cast<size_t>(count));
  a.groups = std::move(groups);
  return a;
}

absl::Status CanSwitchAccounts() {
  if (geteuid() == 0) return absl::OkStatus();
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {};
  if (syscall(SYS_capget, &header, data) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot read this process's capabilities: ", std::strerror(errno)));
  }
  std::vector<std::string> missing;
  for (auto [cap, name] :
       {std::pair<int, const char*>{CAP_SETUID, "CAP_SETUID"}, {CAP_SETGID, "CAP_SETGID"}, {CAP_CHOWN, "CAP_CHOWN"}}) {
    if ((data[cap / 32].effective & (1u << (cap % 32))) == 0) missing.push_back(name);
  }
  if (missing.empty()) return absl::OkStatus();
  std::string list;
  for (const std::string& m : missing) absl::StrAppend(&list, list.empty() ? "" : ", ", m);
  return absl::FailedPreconditionError(absl::StrCat("this server runs as uid ", geteuid(), " without ", list,
                                                    ": it cannot start jobs as other accounts (run it as root, or "
                                                    "give it those capabilities: AmbientCapabilities= in systemd)"));
}

absl::Status GiveTo(int fd, const UnixAccount* account, std::string_view what) {
  if (account == nullptr) return absl::OkStatus();
  if (fchown(fd, account->uid, account->gid) != 0) {
    return absl::InternalError(
        absl::StrCat("cannot give ", std::string(what), " to account ", account->name, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace trainyard
