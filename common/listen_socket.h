// ListenOn: a listening TCP socket bound to one address of this host, for
// the stores a rank serves (c10d::TCPStoreOptions::masterListenFd), which
// otherwise listen on every address of the host.
#ifndef TRAINYARD_COMMON_LISTEN_SOCKET_H_
#define TRAINYARD_COMMON_LISTEN_SOCKET_H_

#include <string>

namespace trainyard {

// A socket (close-on-exec) listening on `host` (a name or an IPv4/IPv6
// address of this host, resolved) and `port` (0: a free one). -1 when it
// cannot (the address is not this host's, the port is taken), with the
// reason in *error.
int ListenOn(const std::string& host, int port, std::string* error);

// The port a socket is bound to; 0 when it cannot tell.
int BoundPort(int fd);

}  // namespace trainyard

#endif  // TRAINYARD_COMMON_LISTEN_SOCKET_H_
