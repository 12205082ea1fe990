#include "common/policy.h"

#include <openssl/sha.h>
#include <yaml-cpp/yaml.h>

#include <fstream>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/paths.h"
#include "common/spec/spec_reader.h"
#include "common/spec/spec_tables.h"
#include "common/spec/yaml_keys.h"

namespace trainyard {
namespace {

using spec_reader::Describe;
using spec_reader::Fail;
using spec_reader::MapReader;
using spec_reader::SpecError;

bool IsSha256Hex(const std::string& s) {
  if (s.size() != 64) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

std::vector<std::string> Names(const YAML::Node& n, const std::string& path) {
  if (!n.IsSequence()) Fail(path, "must be a list of names, got " + Describe(n));
  std::vector<std::string> out;
  for (size_t i = 0; i < n.size(); ++i) {
    const std::string p = absl::StrCat(path, "[", i, "]");
    if (!n[i].IsScalar() || n[i].Scalar().empty() || n[i].Scalar().size() > spec_reader::kMaxName) {
      Fail(p, "must be a name of 1 to 128 characters, got " + Describe(n[i]));
    }
    out.push_back(n[i].Scalar());
  }
  return out;
}

Quota ParseQuota(const YAML::Node& node, const std::string& path) {
  MapReader r(node, path);
  Quota q;
  for (auto [key, field] : {std::pair<const char*, std::optional<int64_t>*>{"slots", &q.slots},
                            {"gpus", &q.gpus},
                            {"queued_jobs", &q.queued_jobs}}) {
    if (!r.Has(key)) {
      r.Child(key);
      continue;
    }
    int64_t v = 0;
    r.Int(key, &v, 0, int64_t{1} << 40);
    *field = v;
  }
  r.String("max_priority_class", &q.max_priority_class, spec_reader::kMaxName);
  r.RejectUnknown();
  return q;
}

Policy ParseRoot(const YAML::Node& root) {
  Policy p;
  MapReader r(root, "");
  if (YAML::Node users = r.Child("users")) {
    if (!users.IsSequence()) Fail("users", "must be a list of users, got " + Describe(users));
    std::set<std::string> names, tokens, subjects;
    for (size_t i = 0; i < users.size(); ++i) {
      const std::string path = absl::StrCat("users[", i, "]");
      MapReader u(users[i], path);
      PolicyUser user;
      u.String("name", &user.name, spec_reader::kMaxName);
      if (user.name.empty()) Fail(u.PathOf("name"), "every user needs a name");
      if (!names.insert(user.name).second) Fail(u.PathOf("name"), "'" + user.name + "' is named twice");
      u.String("token_sha256", &user.token_sha256, 64);
      if (!IsSha256Hex(user.token_sha256)) {
        Fail(u.PathOf("token_sha256"),
             "must be the token's SHA-256 as 64 lower-case hex digits (sha256sum of the token file)");
      }
      if (user.token_sha256 == Sha256Hex("")) {
        Fail(u.PathOf("token_sha256"),
             "is the SHA-256 of an empty token (what sha256sum prints for an empty or missing file): give the "
             "hash of the user's token");
      }
      if (!tokens.insert(user.token_sha256).second) {
        Fail(u.PathOf("token_sha256"), "another user has the same token");
      }
      if (YAML::Node g = u.Child("groups")) user.groups = Names(g, u.PathOf("groups"));
      if (YAML::Node roots = u.Child("roots")) {
        user.roots = Names(roots, u.PathOf("roots"));
        for (size_t k = 0; k < user.roots.size(); ++k) {
          if (user.roots[k].front() != '/') {
            Fail(absl::StrCat(u.PathOf("roots"), "[", k, "]"), "must be an absolute path, got " + user.roots[k]);
          }
        }
      }
      u.String("unix_user", &user.unix_user, 32);
      if (!user.unix_user.empty() && user.unix_user.find_first_of("/:\n ") != std::string::npos) {
        Fail(u.PathOf("unix_user"), "must be an account name, got '" + user.unix_user + "'");
      }
      if (YAML::Node n = u.Child("notify")) spec::ReadNotify(n, u.PathOf("notify"), &user.notify);
      u.String("tls_subject", &user.tls_subject, 1024);
      if (!user.tls_subject.empty() && user.tls_subject.find('=') == std::string::npos) {
        Fail(u.PathOf("tls_subject"),
             "must be a certificate subject such as \"CN=alice,O=Example\", got '" + user.tls_subject + "'");
      }
      if (!user.tls_subject.empty() && !subjects.insert(user.tls_subject).second) {
        Fail(u.PathOf("tls_subject"), "another user has the same certificate subject");
      }
      std::string role = "user";
      u.String("role", &role, 16);
      if (role == "admin") {
        user.role = Role::kAdmin;
      } else if (role != "user") {
        Fail(u.PathOf("role"), "unknown role '" + role + "'; accepted: user, admin");
      }
      u.RejectUnknown();
      p.users.push_back(std::move(user));
    }
  }
  if (YAML::Node classes = r.Child("priority_classes")) {
    MapReader c(classes, "priority_classes");
    for (const auto& kv : classes) {
      const std::string name = kv.first.as<std::string>();
      int64_t value = 0;
      c.Int(name, &value, -(int64_t{1} << 40), int64_t{1} << 40);
      p.priority_classes[name] = value;
    }
  }
  r.String("default_priority_class", &p.default_priority_class, spec_reader::kMaxName);
  if (p.default_priority_class.empty() && !p.priority_classes.empty()) {
    if (!p.priority_classes.count("normal")) {
      Fail("default_priority_class", "is needed when no class is named 'normal' (jobs without a priority get it)");
    }
    p.default_priority_class = "normal";
  }
  if (!p.default_priority_class.empty() && !p.priority_classes.count(p.default_priority_class)) {
    Fail("default_priority_class", "'" + p.default_priority_class + "' is not one of priority_classes");
  }
  if (YAML::Node quotas = r.Child("quotas")) {
    MapReader q(quotas, "quotas");
    std::set<std::string> groups;
    for (const PolicyUser& u : p.users) groups.insert(u.groups.begin(), u.groups.end());
    if (YAML::Node users = q.Child("users")) {
      if (!users.IsMap()) Fail("quotas.users", "must map user names to quotas, got " + Describe(users));
      for (const auto& kv : users) {
        const std::string name = kv.first.as<std::string>();
        const std::string path = "quotas.users." + name;
        if (p.User(name) == nullptr) Fail(path, "no user is named '" + name + "'");
        p.user_quotas[name] = ParseQuota(kv.second, path);
      }
    }
    if (YAML::Node gs = q.Child("groups")) {
      if (!gs.IsMap()) Fail("quotas.groups", "must map group names to quotas, got " + Describe(gs));
      for (const auto& kv : gs) {
        const std::string name = kv.first.as<std::string>();
        const std::string path = "quotas.groups." + name;
        if (!groups.count(name)) Fail(path, "no user is in group '" + name + "'");
        p.group_quotas[name] = ParseQuota(kv.second, path);
      }
    }
    q.RejectUnknown();
  }
  for (const auto* quotas : {&p.user_quotas, &p.group_quotas}) {
    for (const auto& [name, quota] : *quotas) {
      if (!quota.max_priority_class.empty() && !p.priority_classes.count(quota.max_priority_class)) {
        Fail(absl::StrCat("quotas.", quotas == &p.user_quotas ? "users." : "groups.", name, ".max_priority_class"),
             "'" + quota.max_priority_class + "' is not one of priority_classes");
      }
    }
  }
  if (YAML::Node n = r.Child("notify")) spec::ReadNotify(n, "notify", &p.notify);
  r.Bool("group_visibility", &p.group_visibility);
  r.Bool("shared_account", &p.shared_account);
  r.String("default_unix_user", &p.default_unix_user, 32);
  if (!p.default_unix_user.empty() && p.default_unix_user.find_first_of("/:\n ") != std::string::npos) {
    Fail("default_unix_user", "must be an account name, got '" + p.default_unix_user + "'");
  }
  r.RejectUnknown();
  return p;
}

}  // namespace

bool Policy::SwitchesAccounts() const {
  if (!default_unix_user.empty()) return true;
  for (const PolicyUser& u : users) {
    if (!u.unix_user.empty()) return true;
  }
  return false;
}

const PolicyUser* Policy::UserOfSubject(std::string_view subject) const {
  if (subject.empty()) return nullptr;
  for (const PolicyUser& u : users) {
    if (u.tls_subject == subject) return &u;
  }
  return nullptr;
}

const PolicyUser* Policy::UserOfToken(std::string_view token) const {
  const std::string hash = Sha256Hex(token);
  for (const PolicyUser& u : users) {
    if (u.token_sha256 == hash) return &u;
  }
  return nullptr;
}

const PolicyUser* Policy::User(std::string_view name) const {
  for (const PolicyUser& u : users) {
    if (u.name == name) return &u;
  }
  return nullptr;
}

std::optional<int64_t> Policy::Priority(std::string_view class_name) const {
  const std::string name(class_name.empty() ? std::string_view(default_priority_class) : class_name);
  auto it = priority_classes.find(name);
  if (it == priority_classes.end()) return std::nullopt;
  return it->second;
}

absl::StatusOr<Policy> ParsePolicy(std::string_view yaml_text, std::string_view source) {
  // A file being written, cut short, or emptied by mistake would otherwise
  // read as a policy with fewer users, or none.
  if (yaml_text.find_first_not_of(" \t\r\n") == std::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat(std::string(source),
                     ": is empty: a policy file lists the server's users (to run without users, start the "
                     "server without --policy-file)"));
  }
  if (yaml_text.back() != '\n') {
    return absl::InvalidArgumentError(
        absl::StrCat(std::string(source), ": does not end with a newline: it looks cut short (a write in progress?)"));
  }
  YAML::Node root;
  try {
    root = YAML::Load(std::string(yaml_text));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(std::string(source), ": not YAML: ", e.what()));
  }
  try {
    if (root.IsNull()) {
      return absl::InvalidArgumentError(
          absl::StrCat(std::string(source),
                       ": holds no settings: a policy file lists the server's users (to run without "
                       "users, start the server without --policy-file)"));
    }
    if (auto s = CheckNoDuplicateKeys(root, std::string(source)); !s.ok()) return s;
    return ParseRoot(root);
  } catch (const SpecError& e) {
    // "spec field 'x': ..." → "FILE: field 'x': ..."
    std::string message = e.message;
    if (message.rfind("spec ", 0) == 0) message = message.substr(5);
    return absl::InvalidArgumentError(absl::StrCat(std::string(source), ": ", message));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(std::string(source), ": ", e.what()));
  }
}

absl::StatusOr<Policy> ReadPolicy(const std::string& path) {
  absl::StatusOr<std::string> text = ReadBoundedFile(path, kMaxPolicyBytes);
  if (!text.ok()) return text.status();
  absl::StatusOr<Policy> p = ParsePolicy(*text, path);
  if (!p.ok() || !p->SwitchesAccounts()) return p;
  if (absl::Status s = CanSwitchAccounts(); !s.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(path, ": names users' unix_user accounts, but ", s.message()));
  }
  for (size_t i = 0; i < p->users.size(); ++i) {
    PolicyUser& u = p->users[i];
    if (u.unix_user.empty()) continue;
    absl::StatusOr<UnixAccount> a = LookupUnixAccount(u.unix_user);
    if (!a.ok())
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": field 'users[", i, "].unix_user': ", a.status().message()));
    u.account = *std::move(a);
  }
  if (!p->default_unix_user.empty()) {
    if (absl::StatusOr<UnixAccount> a = LookupUnixAccount(p->default_unix_user); !a.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": field 'default_unix_user': ", a.status().message()));
    }
  }
  return p;
}

std::string Sha256Hex(std::string_view text) {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(text.data()), text.size(), digest);
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * SHA256_DIGEST_LENGTH);
  for (unsigned char b : digest) {
    out += kHex[b >> 4];
    out += kHex[b & 15];
  }
  return out;
}

}  // namespace trainyard
