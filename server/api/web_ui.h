// WebUi: the coordinator's web pages and their JSON API, on their own HTTP
// listener (--http-listen). The pages (server/api/web/, with Debian's Chart.js,
// compiled into the binary: no CDN, no network) are one script that reads
// the API:
//
//   GET  /ui/, /ui/jobs/<id>, /ui/queue   the page (a job's page: HTTP 404
//                                         when the signed-in user may not see it)
//   GET  /ui/static/<file>                its script, styles and Chart.js
//   POST /ui/api/login {"token": "..."}   signs in: a session cookie
//                                         (HttpOnly, SameSite=Strict) and a
//                                         CSRF token
//   GET  /ui/api/session                  who is signed in, and the CSRF token
//   POST /ui/api/logout
//   POST /ui/api/v1/<Method>              a JobService method, its request
//                                         and response as proto JSON
//                                         (GetJob, ListJobs, GetQueue,
//                                         GetJobHistory, GetLogs,
//                                         ListCheckpoints, CancelJob,
//                                         CheckpointJob, ResumeJob, ScaleJob,
//                                         SubmitJob, DiagnoseJob)
//
// Every API call needs the session cookie and its CSRF token in the
// X-CSRF-Token header (403 without). A call is the gRPC method's, for the
// signed-in user: the same ownership rules, its gRPC code as an HTTP status
// (NOT_FOUND 404, PERMISSION_DENIED 403, ...) with {"code", "message"}.
// On a server without users anyone signs in (with any token) as anyone;
// one that knows its users by client certificate alone (mutual TLS, no
// tokens) signs in nobody, since this HTTP listener sees no certificate.
// Requests whose Host header is not an IP address, localhost or an
// --http-allowed-host are refused (a DNS-rebinding page sends its own).
#ifndef TRAINYARD_SERVER_API_WEB_UI_H_
#define TRAINYARD_SERVER_API_WEB_UI_H_

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "server/api/rpc_services.h"
#include "server/api/web_sessions.h"
#include "server/auth/identities.h"

struct mg_context;
struct mg_connection;

namespace trainyard {

struct WebUiOptions {
  std::string listen;  // HOST:PORT; port 0: any free port
  std::chrono::seconds session_ttl{12 * 3600};
  // Host names requests may name besides IP addresses and localhost
  // (--http-allowed-host); any other Host header is refused (403).
  std::vector<std::string> allowed_hosts;
};

class WebUi {
 public:
  // `service` and `identities` (null: a server without users) must outlive
  // this.
  WebUi(JobServiceImpl* service, const Identities* identities, WebUiOptions options);
  ~WebUi();
  WebUi(const WebUi&) = delete;
  WebUi& operator=(const WebUi&) = delete;

  // Listens; Unavailable naming the address when it cannot.
  absl::Status Start();
  // Stops listening and waits for the requests being served.
  void Stop();
  int port() const { return port_; }

 private:
  static int Handle(mg_connection* conn, void* self);
  int Serve(mg_connection* conn);

  JobServiceImpl* const service_;
  const Identities* const identities_;
  const WebUiOptions options_;
  WebSessions sessions_;
  mg_context* ctx_ = nullptr;
  int port_ = 0;
};

}  // namespace trainyard

#endif  // TRAINYARD_SERVER_API_WEB_UI_H_
