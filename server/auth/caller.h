// Caller: who made a request of the JobService, as the server's identities
// (server/auth/identities.h) resolved them. Torch- and gRPC-free.
#ifndef TRAINYARD_SERVER_AUTH_CALLER_H_
#define TRAINYARD_SERVER_AUTH_CALLER_H_

#include <string>
#include <vector>

namespace trainyard {

struct Caller {
  // The user's name; "" on a server without users (anyone may do anything)
  // and for the --auth-token-file token (an admin).
  std::string user;
  std::vector<std::string> groups;
  bool admin = false;
  // Where this caller's jobs may read and write; empty: the server's roots.
  std::vector<std::string> roots;
  // The Unix account its jobs run as (the policy's unix_user); "": the
  // server's own.
  std::string unix_user;

  // The group a job of this caller counts against: its first, or none.
  std::string group() const { return groups.empty() ? "" : groups.front(); }
  // How events and errors name it.
  std::string Describe() const { return user.empty() ? (admin ? "the admin token" : "anyone") : "user " + user; }
};

}  // namespace trainyard

#endif  // TRAINYARD_SERVER_AUTH_CALLER_H_
