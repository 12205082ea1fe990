#include "server/metrics/metrics_endpoint.h"

#include <civetweb.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "prometheus/collectable.h"
#include "prometheus/text_serializer.h"
#include "spdlog/spdlog.h"

namespace trainyard {
namespace {

int Send(mg_connection* conn, int status, const std::string& content_type, const std::string& body, bool head) {
  mg_printf(conn,
            "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\nCache-Control: no-store\r\n"
            "Connection: close\r\n\r\n",
            status, mg_get_response_code_text(conn, status), content_type.c_str(), body.size());
  if (!head) mg_write(conn, body.data(), body.size());
  return status;
}

}  // namespace

MetricsEndpoint::MetricsEndpoint(std::string listen) : listen_(std::move(listen)) {}

MetricsEndpoint::~MetricsEndpoint() { Stop(); }

absl::Status MetricsEndpoint::Start() {
  // A connection that sends its request slowly holds one of these threads
  // for up to request_timeout_ms at a time: more threads than a scraper
  // needs, and a short timeout (docs/reference/security.md).
  const char* opts[] = {"listening_ports", listen_.c_str(), "num_threads", "16", "request_timeout_ms", "5000", nullptr};
  mg_callbacks callbacks{};
  callbacks.log_message = [](const mg_connection*, const char* message) {
    spdlog::debug("metrics: {}", message);
    return 1;
  };
  mg_init_library(0);
  ctx_ = mg_start(&callbacks, nullptr, opts);
  if (ctx_ == nullptr) {
    return absl::UnavailableError(absl::StrCat("--metrics-listen ", listen_, ": cannot listen there"));
  }
  mg_set_request_handler(ctx_, "/", &MetricsEndpoint::Handle, this);
  mg_server_port ports[4];
  const int n = mg_get_server_ports(ctx_, 4, ports);
  port_ = n > 0 ? ports[0].port : 0;
  return absl::OkStatus();
}

void MetricsEndpoint::Stop() {
  if (ctx_ == nullptr) return;
  mg_stop(ctx_);
  ctx_ = nullptr;
}

int MetricsEndpoint::port() const { return port_; }

void MetricsEndpoint::Add(const std::shared_ptr<prometheus::Collectable>& collectable) {
  absl::MutexLock l(&mu_);
  collectables_.push_back(collectable);
}

void MetricsEndpoint::Remove(const std::shared_ptr<prometheus::Collectable>& collectable) {
  absl::MutexLock l(&mu_);
  std::erase_if(collectables_, [&](const std::weak_ptr<prometheus::Collectable>& c) {
    auto held = c.lock();
    return !held || held == collectable;
  });
}

void MetricsEndpoint::SetReadiness(Readiness readiness) {
  absl::MutexLock l(&mu_);
  readiness_ = std::move(readiness);
}

int MetricsEndpoint::Handle(mg_connection* conn, void* self) {
  return static_cast<MetricsEndpoint*>(self)->Serve(conn);
}

int MetricsEndpoint::Serve(mg_connection* conn) {
  const mg_request_info* ri = mg_get_request_info(conn);
  const std::string method = ri->request_method ? ri->request_method : "";
  const std::string path = ri->local_uri ? ri->local_uri : "/";
  const bool head = method == "HEAD";
  if (method != "GET" && !head) return Send(conn, 405, "text/plain", "only GET and HEAD\n", false);
  if (path == "/livez") return Send(conn, 200, "text/plain", "ok\n", head);
  if (path == "/readyz") {
    Readiness readiness;
    {
      absl::MutexLock l(&mu_);
      readiness = readiness_;
    }
    auto [ready, why] = readiness ? readiness() : std::pair<bool, std::string>{true, "ok"};
    return Send(conn, ready ? 200 : 503, "text/plain", why + "\n", head);
  }
  if (path != "/metrics") return Send(conn, 404, "text/plain", "not found: /metrics, /livez or /readyz\n", head);
  std::vector<std::shared_ptr<prometheus::Collectable>> held;
  {
    absl::MutexLock l(&mu_);
    for (const auto& c : collectables_) {
      if (auto p = c.lock()) held.push_back(std::move(p));
    }
  }
  std::vector<prometheus::MetricFamily> families;
  for (const auto& c : held) {
    auto more = c->Collect();
    families.insert(families.end(), std::make_move_iterator(more.begin()), std::make_move_iterator(more.end()));
  }
  return Send(conn, 200, "text/plain; version=0.0.4; charset=utf-8", prometheus::TextSerializer().Serialize(families),
              head);
}

}  // namespace trainyard
