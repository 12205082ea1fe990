#include "server/launcher.h"

#include <unistd.h>

#include <string_view>

namespace trainyard {

std::vector<std::string> EnvironmentWith(const std::vector<std::string>& overrides) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string_view entry(*e);
    bool replaced = false;
    for (const std::string& x : overrides) replaced = replaced || entry.rfind(x.substr(0, x.find('=') + 1), 0) == 0;
    if (!replaced) env.emplace_back(entry);
  }
  env.insert(env.end(), overrides.begin(), overrides.end());
  return env;
}

std::vector<char*> ExecEnvironment(std::vector<std::string>& env) {
  std::vector<char*> envp;
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  return envp;
}

}  // namespace trainyard
