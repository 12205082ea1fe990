#include "server/api/web_ui.h"

#include <arpa/inet.h>
#include <civetweb.h>
#include <google/protobuf/util/json_util.h>

#include <functional>
#include <map>
#include <string_view>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "nlohmann/json.hpp"
#include "server/api/web_assets.h"
#include "spdlog/spdlog.h"

namespace trainyard {
namespace {

constexpr char kCookie[] = "trainyard_session";
constexpr int64_t kMaxBody = 8 << 20;
constexpr std::chrono::seconds kCallDeadline{60};

struct Reply {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::string> headers;
  bool cache = false;  // static assets
};

Reply Json(int status, const nlohmann::json& j) { return {status, "application/json", j.dump()}; }

Reply Error(int status, std::string_view code, std::string_view message) {
  return Json(status, {{"code", code}, {"message", message}});
}

int HttpStatusOf(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK: return 200;
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::FAILED_PRECONDITION:
    case grpc::StatusCode::OUT_OF_RANGE: return 400;
    case grpc::StatusCode::UNAUTHENTICATED: return 401;
    case grpc::StatusCode::PERMISSION_DENIED: return 403;
    case grpc::StatusCode::NOT_FOUND: return 404;
    case grpc::StatusCode::ALREADY_EXISTS:
    case grpc::StatusCode::ABORTED: return 409;
    case grpc::StatusCode::RESOURCE_EXHAUSTED: return 429;
    case grpc::StatusCode::CANCELLED: return 499;
    case grpc::StatusCode::UNIMPLEMENTED: return 501;
    case grpc::StatusCode::UNAVAILABLE: return 503;
    case grpc::StatusCode::DEADLINE_EXCEEDED: return 504;
    default: return 500;
  }
}

constexpr const char* kCodeNames[] = {
    "OK",        "CANCELLED",      "UNKNOWN",           "INVALID_ARGUMENT",   "DEADLINE_EXCEEDED",
    "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
    "ABORTED",   "OUT_OF_RANGE",   "UNIMPLEMENTED",     "INTERNAL",           "UNAVAILABLE",
    "DATA_LOSS", "UNAUTHENTICATED"};

Reply FromGrpc(const grpc::Status& s) {
  const int code = static_cast<int>(s.error_code());
  return Error(HttpStatusOf(s.error_code()), code >= 0 && code <= 16 ? kCodeNames[code] : "UNKNOWN", s.error_message());
}

// A JobService method with proto JSON in and out.
using ApiMethod = std::function<Reply(const Caller&, const std::string& body)>;

template <typename Req, typename Resp>
ApiMethod Method(JobServiceImpl* service,
                 grpc::Status (JobServiceImpl::*method)(const Caller&, const Req*, Resp*, const CallContext&)) {
  return [service, method](const Caller& caller, const std::string& body) {
    Req req;
    google::protobuf::util::JsonParseOptions in;
    auto parsed = google::protobuf::util::JsonStringToMessage(body.empty() ? "{}" : body, &req, in);
    if (!parsed.ok()) {
      return Error(400, "INVALID_ARGUMENT", absl::StrCat("request body: ", parsed.ToString()));
    }
    Resp resp;
    CallContext call;
    call.deadline = std::chrono::system_clock::now() + kCallDeadline;
    if (grpc::Status s = (service->*method)(caller, &req, &resp, call); !s.ok()) return FromGrpc(s);
    google::protobuf::util::JsonPrintOptions out;
    out.preserve_proto_field_names = true;
    out.always_print_primitive_fields = true;
    Reply r;
    google::protobuf::util::MessageToJsonString(resp, &r.body, out);
    return r;
  };
}

std::map<std::string, ApiMethod> Methods(JobServiceImpl* s) {
  return {
      {"GetJob", Method(s, &JobServiceImpl::GetJob)},
      {"ListJobs", Method(s, &JobServiceImpl::ListJobs)},
      {"GetQueue", Method(s, &JobServiceImpl::GetQueue)},
      {"GetJobHistory", Method(s, &JobServiceImpl::GetJobHistory)},
      {"GetLogs", Method(s, &JobServiceImpl::GetLogs)},
      {"ListCheckpoints", Method(s, &JobServiceImpl::ListCheckpoints)},
      {"CancelJob", Method(s, &JobServiceImpl::CancelJob)},
      {"CheckpointJob", Method(s, &JobServiceImpl::CheckpointJob)},
      {"ResumeJob", Method(s, &JobServiceImpl::ResumeJob)},
      {"ScaleJob", Method(s, &JobServiceImpl::ScaleJob)},
      {"SubmitJob", Method(s, &JobServiceImpl::SubmitJob)},
      {"DiagnoseJob", Method(s, &JobServiceImpl::DiagnoseJob)},
      {"SubmitSweep", Method(s, &JobServiceImpl::SubmitSweep)},
      {"GetSweep", Method(s, &JobServiceImpl::GetSweep)},
      {"ListSweeps", Method(s, &JobServiceImpl::ListSweeps)},
      {"CancelSweep", Method(s, &JobServiceImpl::CancelSweep)},
  };
}

void Send(mg_connection* conn, const Reply& r) {
  std::string head =
      absl::StrCat("HTTP/1.1 ", r.status, " ", mg_get_response_code_text(conn, r.status),
                   "\r\nContent-Type: ", r.content_type, "\r\nContent-Length: ", r.body.size(),
                   "\r\nX-Content-Type-Options: nosniff\r\nReferrer-Policy: no-referrer\r\nX-Frame-Options: DENY\r\n"
                   "Content-Security-Policy: default-src 'self'; img-src 'self' data:; style-src 'self' "
                   "'unsafe-inline'; frame-ancestors 'none'; form-action 'self'\r\n",
                   r.cache ? "Cache-Control: max-age=3600\r\n" : "Cache-Control: no-store\r\n");
  for (const std::string& h : r.headers) absl::StrAppend(&head, h, "\r\n");
  head += "\r\n";
  mg_write(conn, head.data(), head.size());
  const mg_request_info* ri = mg_get_request_info(conn);
  if (ri->request_method == nullptr || std::string_view(ri->request_method) != "HEAD") {
    mg_write(conn, r.body.data(), r.body.size());
  }
}

std::string Header(mg_connection* conn, const char* name) {
  const char* v = mg_get_header(conn, name);
  return v == nullptr ? "" : v;
}

// Whether a request's Host header names this server: an IP address
// (v4, or v6 in brackets), localhost, or one of `allowed` (--http-allowed-host).
bool AllowedHost(const std::string& host_header, const std::vector<std::string>& allowed) {
  std::string host = host_header;
  if (absl::StartsWith(host, "[")) {
    const size_t end = host.find(']');
    if (end == std::string::npos) return false;
    in6_addr v6;
    return inet_pton(AF_INET6, host.substr(1, end - 1).c_str(), &v6) == 1;
  }
  if (const size_t colon = host.rfind(':'); colon != std::string::npos) host.resize(colon);
  host = absl::AsciiStrToLower(host);
  in_addr v4;
  if (host == "localhost" || inet_pton(AF_INET, host.c_str(), &v4) == 1) return true;
  for (const std::string& a : allowed) {
    if (host == absl::AsciiStrToLower(a)) return true;
  }
  return false;
}

std::string SessionCookie(mg_connection* conn) {
  const std::string cookies = Header(conn, "Cookie");
  char value[128];
  if (cookies.empty() || mg_get_cookie(cookies.c_str(), kCookie, value, sizeof value) <= 0) return "";
  return value;
}

// The request's body, at most kMaxBody; nullopt when larger.
std::optional<std::string> ReadBody(mg_connection* conn) {
  const mg_request_info* ri = mg_get_request_info(conn);
  if (ri->content_length > kMaxBody) return std::nullopt;
  std::string body;
  char buf[16384];
  for (;;) {
    const int n = mg_read(conn, buf, sizeof buf);
    if (n <= 0) break;
    body.append(buf, n);
    if (static_cast<int64_t>(body.size()) > kMaxBody) return std::nullopt;
  }
  return body;
}

std::string SetCookie(const std::string& value, std::chrono::seconds max_age) {
  return absl::StrCat("Set-Cookie: ", kCookie, "=", value,
                      "; Path=/ui; HttpOnly; SameSite=Strict; Max-Age=", max_age.count());
}

}  // namespace

WebUi::WebUi(JobServiceImpl* service, const Identities* identities, WebUiOptions options)
    : service_(service), identities_(identities), options_(std::move(options)), sessions_(options_.session_ttl) {}

WebUi::~WebUi() { Stop(); }

absl::Status WebUi::Start() {
  // civetweb's form of HOST:PORT; "[::1]:0" stays as it is.
  // A connection that sends its request slowly holds a thread for up to
  // request_timeout_ms at a time (docs/reference/security.md).
  const char* opts[] = {"listening_ports",
                        options_.listen.c_str(),
                        "num_threads",
                        "32",
                        "request_timeout_ms",
                        "5000",
                        "enable_keep_alive",
                        "yes",
                        "keep_alive_timeout_ms",
                        "5000",
                        nullptr};
  mg_callbacks callbacks{};
  callbacks.log_message = [](const mg_connection*, const char* message) {
    spdlog::debug("web: {}", message);
    return 1;
  };
  mg_init_library(0);
  ctx_ = mg_start(&callbacks, nullptr, opts);
  if (ctx_ == nullptr) {
    return absl::UnavailableError(absl::StrCat("--http-listen ", options_.listen, ": cannot listen there"));
  }
  mg_set_request_handler(ctx_, "/", &WebUi::Handle, this);
  mg_server_port ports[4];
  const int n = mg_get_server_ports(ctx_, 4, ports);
  port_ = n > 0 ? ports[0].port : 0;
  return absl::OkStatus();
}

void WebUi::Stop() {
  if (ctx_ == nullptr) return;
  mg_stop(ctx_);
  ctx_ = nullptr;
}

int WebUi::Handle(mg_connection* conn, void* self) { return static_cast<WebUi*>(self)->Serve(conn); }

int WebUi::Serve(mg_connection* conn) {
  const mg_request_info* ri = mg_get_request_info(conn);
  const std::string method = ri->request_method ? ri->request_method : "";
  const std::string path = ri->local_uri ? ri->local_uri : "/";
  Reply reply;
  auto finish = [&](Reply r) {
    Send(conn, r);
    return r.status;
  };
  const bool get = method == "GET" || method == "HEAD";
  // A page of another site whose name now resolves to this address (DNS
  // rebinding) sends its own name as Host: only this server's are served.
  if (const std::string host = Header(conn, "Host"); !host.empty() && !AllowedHost(host, options_.allowed_hosts)) {
    return finish(Error(403, "PERMISSION_DENIED",
                        absl::StrCat("Host '", host,
                                     "' is not a name of this server: open the web UI by its IP address or localhost, "
                                     "or start the server with --http-allowed-host NAME")));
  }
  if (path == "/favicon.ico") return finish({204, "image/x-icon", ""});
  if (path == "/" || path == "/ui") {
    return finish({302, "text/plain", "", {"Location: /ui/"}});
  }
  if (absl::StartsWith(path, "/ui/static/") && get) {
    std::optional<WebAsset> asset = FindWebAsset(path.substr(11));
    if (!asset) return finish(Error(404, "NOT_FOUND", "no such file"));
    Reply r{200, std::string(asset->content_type), std::string(asset->body)};
    r.cache = true;
    return finish(r);
  }

  // The signed-in user: the session's token, checked again now.
  std::optional<WebSessions::Session> session;
  if (std::string id = SessionCookie(conn); !id.empty()) session = sessions_.Find(id);
  // Open: anyone may do anything, on the web UI too. Not a server that asks
  // every caller for a client certificate (mutual TLS): this HTTP listener
  // sees none, so nobody signs in here.
  const bool open = identities_ == nullptr || (identities_->open() && !identities_->requires_client_certificates());
  auto caller_of = [&](const WebSessions::Session& s) -> absl::StatusOr<Caller> {
    if (open) return Caller{};
    if (identities_->requires_client_certificates()) {
      return absl::UnauthenticatedError(
          "this server asks every caller for a client certificate (mutual TLS), which its web UI over HTTP cannot "
          "check: nobody signs in here; use trainctl or trainyard.Client with a certificate (or run the server "
          "with --http-listen '')");
    }
    return identities_->Authenticate(absl::StrCat("Bearer ", s.token), Identities::PeerCertificate{});
  };

  if (absl::StartsWith(path, "/ui/api/")) {
    const std::string api = path.substr(8);
    if (api == "session" && get) {
      std::vector<std::string> headers;
      if (!session && open) {  // anyone may do anything: a session for the CSRF token
        session = sessions_.Open("");
        headers.push_back(SetCookie(session->id, options_.session_ttl));
      }
      if (!session) return finish(Error(401, "UNAUTHENTICATED", "sign in with your token"));
      absl::StatusOr<Caller> who = caller_of(*session);
      if (!who.ok()) {
        sessions_.Close(session->id);
        return finish(Error(401, "UNAUTHENTICATED", std::string(who.status().message())));
      }
      Reply r = Json(200, {{"user", who->user},
                           {"admin", who->admin || open},
                           {"groups", who->groups},
                           {"open", open},
                           {"csrf", session->csrf}});
      r.headers = headers;
      return finish(r);
    }
    if (method != "POST") return finish(Error(405, "INVALID_ARGUMENT", "the API takes POST (GET for session)"));
    // A cross-site form cannot send JSON without the browser asking first.
    if (!absl::StartsWith(Header(conn, "Content-Type"), "application/json")) {
      return finish(Error(415, "INVALID_ARGUMENT", "the API takes Content-Type: application/json"));
    }
    std::optional<std::string> body = ReadBody(conn);
    if (!body) return finish(Error(413, "INVALID_ARGUMENT", absl::StrCat("request body over ", kMaxBody, " bytes")));
    if (api == "login") {
      nlohmann::json j = nlohmann::json::parse(*body, nullptr, /*allow_exceptions=*/false);
      if (!j.is_object() || !j.contains("token") || !j["token"].is_string()) {
        return finish(Error(400, "INVALID_ARGUMENT", "field 'token': a string is required"));
      }
      const std::string token = j["token"].get<std::string>();
      // The token first: a right one signs in, whatever others got wrong
      // from this address (a shared host, the proxy in front) or any. Wrong
      // ones may be guesses: a few a minute per address and from all
      // together are answered and logged, the rest refused (429).
      const std::string address = ri->remote_addr;
      WebSessions::Session candidate{"", "", token, {}};
      absl::StatusOr<Caller> who = caller_of(candidate);
      if (!who.ok()) {
        const WebSessions::SignInFailure failed = sessions_.FailedSignIn(address);
        if (failed.wait.count() > 0) {
          Reply r = Error(429, "RESOURCE_EXHAUSTED",
                          absl::StrCat("too many failed sign-ins ",
                                       failed.everyone ? std::string("from all addresses") : "from " + address,
                                       " in the last minute; try again in ", failed.wait.count(), " s"));
          r.headers.push_back(absl::StrCat("Retry-After: ", failed.wait.count()));
          return finish(r);
        }
        spdlog::warn("web UI: failed sign-in from {} ({} in the last minute): {}", log::Escaped(address),
                     failed.from_address, std::string(who.status().message()));
        return finish(Error(401, "UNAUTHENTICATED", std::string(who.status().message())));
      }
      if (session) sessions_.Close(session->id);
      WebSessions::Session s = sessions_.Open(token);
      Reply r = Json(200, {{"user", who->user}, {"admin", who->admin || open}, {"csrf", s.csrf}});
      r.headers.push_back(SetCookie(s.id, options_.session_ttl));
      return finish(r);
    }
    if (!session) return finish(Error(401, "UNAUTHENTICATED", "sign in first (POST /ui/api/login)"));
    if (!WebSessions::CsrfMatches(*session, Header(conn, "X-CSRF-Token"))) {
      return finish(Error(403, "PERMISSION_DENIED", "missing or wrong X-CSRF-Token header"));
    }
    if (api == "logout") {
      sessions_.Close(session->id);
      Reply r = Json(200, nlohmann::json::object());
      r.headers.push_back(SetCookie("", std::chrono::seconds(0)));
      return finish(r);
    }
    absl::StatusOr<Caller> who = caller_of(*session);
    if (!who.ok()) {
      sessions_.Close(session->id);
      return finish(Error(401, "UNAUTHENTICATED", std::string(who.status().message())));
    }
    if (absl::StartsWith(api, "v1/")) {
      const std::map<std::string, ApiMethod> methods = Methods(service_);
      auto it = methods.find(api.substr(3));
      if (it == methods.end()) return finish(Error(404, "NOT_FOUND", absl::StrCat("no API method ", api.substr(3))));
      return finish(it->second(*who, *body));
    }
    return finish(Error(404, "NOT_FOUND", "no such API"));
  }

  if (!get) return finish(Error(405, "INVALID_ARGUMENT", "pages take GET"));
  const bool page = path == "/ui/" || path == "/ui/queue" || absl::StartsWith(path, "/ui/jobs/") ||
                    path == "/ui/sweeps" || absl::StartsWith(path, "/ui/sweeps/") || path == "/ui/compare";
  if (!page) return finish({404, "text/html; charset=utf-8", "<h1>404</h1><p>No such page.</p>"});
  std::optional<WebAsset> index = FindWebAsset("index.html");
  Reply r{200, "text/html; charset=utf-8", index ? std::string(index->body) : ""};
  // A job the signed-in user may not see has no page: the same 404 as a job
  // that does not exist.
  if (absl::StartsWith(path, "/ui/jobs/") && session) {
    absl::StatusOr<Caller> who = caller_of(*session);
    if (who.ok()) {
      v1::GetJobRequest req;
      req.set_id(path.substr(9));
      v1::GetJobResponse resp;
      if (grpc::Status s = service_->GetJob(*who, &req, &resp); !s.ok()) {
        r.status = s.error_code() == grpc::StatusCode::PERMISSION_DENIED ? 404 : HttpStatusOf(s.error_code());
      }
    }
  }
  return finish(r);
}

}  // namespace trainyard
