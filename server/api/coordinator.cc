#include "server/api/coordinator.h"

#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/credentials.h"
#include "common/listen_socket.h"
#include "server/api/standby_server.h"
#include "server/leadership/leadership.h"
#include "server/metrics/metric_table.h"
#include "server/metrics/metrics_endpoint.h"
#include "server/store/fence.h"
#include "server/store/pg_connection.h"
#include "server/store/stores.h"
#include "spdlog/spdlog.h"

namespace trainyard {
namespace {

// "host:port" → host, port (IPv6 brackets kept).
std::pair<std::string, std::string> SplitHostPort(const std::string& addr) {
  auto pos = addr.rfind(':');
  if (pos == std::string::npos) return {addr, ""};
  return {addr.substr(0, pos), addr.substr(pos + 1)};
}

std::string ThisHost() {
  char name[256] = {0};
  gethostname(name, sizeof(name) - 1);
  return name;
}

// Where others reach `listen` (bound to `port`): --advertise-addr, or the
// listen host, or this host's name for a wildcard.
std::string Reachable(const std::string& advertise, const std::string& listen, int port) {
  std::string host = advertise.empty() ? SplitHostPort(listen).first : advertise;
  if (host == "0.0.0.0" || host == "[::]" || host.empty()) host = ThisHost();
  if (host.find(':') != std::string::npos && host.back() != ']') return host;  // it names its port
  return absl::StrCat(host, ":", port);
}

// Waits (up to 5 s) until nothing listens on `listen`'s port any more. gRPC
// closes a stopped server's listening socket a moment after it returns, and
// while it lingers the next server's (SO_REUSEPORT) shares the port: the
// connections the kernel hands the old one are never answered, and a worker
// waits out its connect timeout.
void AwaitPortFree(const std::string& listen) {
  auto [host, port_text] = SplitHostPort(listen);
  if (host.size() > 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  int port = 0;
  if (!absl::SimpleAtoi(port_text, &port) || port <= 0) return;
  for (int i = 0; i < 100; ++i) {
    std::string error;
    const int fd = ListenOn(host.empty() ? "0.0.0.0" : host, port, &error);
    if (fd >= 0) {
      close(fd);
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  spdlog::warn("trainyard-server: {} is still taken 5 s after its server stopped", listen);
}

// trainyard_coordinator_leader and _term, read from the leadership at each
// scrape.
class RoleMetrics final : public prometheus::Collectable {
 public:
  explicit RoleMetrics(const Leadership* leadership) : leadership_(leadership) {}
  std::vector<prometheus::MetricFamily> Collect() const override {
    const Leadership::View v = leadership_->view();
    auto gauge = [](const std::string& name, double value) {
      const MetricFamily& table = MetricNamed(name);
      prometheus::MetricFamily f{table.name, table.help, prometheus::MetricType::Gauge, {}};
      prometheus::ClientMetric m;
      m.gauge.value = value;
      f.metric.push_back(m);
      return f;
    };
    return {gauge("trainyard_coordinator_leader", v.role == Leadership::Role::kLeader ? 1 : 0),
            gauge("trainyard_coordinator_term", static_cast<double>(v.term))};
  }

 private:
  const Leadership* const leadership_;
};

}  // namespace

struct Coordinator::Impl {
  ServerOptions options;
  bool shared = false;  // PostgreSQL: leadership applies

  // SQLite: the one server. PostgreSQL: the server of the term held now.
  absl::Mutex mu;
  std::unique_ptr<Server> server ABSL_GUARDED_BY(mu);
  bool serving ABSL_GUARDED_BY(mu) = false;  // `server` started
  bool stopping ABSL_GUARDED_BY(mu) = false;
  absl::Mutex shutdown_mu;
  bool shut_down ABSL_GUARDED_BY(shutdown_mu) = false;

  // PostgreSQL only.
  std::unique_ptr<MetricsEndpoint> endpoint;
  std::shared_ptr<RoleMetrics> role_metrics;
  std::unique_ptr<StandbyServer> standby;
  std::unique_ptr<Leadership> leadership;

  absl::Status StartShared();
  void RunShared();
  absl::Status WriteReadyFile(int grpc_port, int metrics_port, const char* role) const;
};

Coordinator::Coordinator(ServerOptions options) : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
  impl_->shared = pg::IsPostgresUrl(impl_->options.store);
}

Coordinator::~Coordinator() { Shutdown(); }

absl::Status Coordinator::Start() {
  Impl& s = *impl_;
  if (s.shared) return s.StartShared();
  absl::MutexLock l(&s.mu);
  s.server = std::make_unique<Server>(s.options);
  if (absl::Status st = s.server->Start(); !st.ok()) return st;
  s.serving = true;
  return absl::OkStatus();
}

absl::Status Coordinator::Impl::WriteReadyFile(int grpc_port, int metrics_port, const char* role) const {
  const std::string& path = options.ready_file;
  if (path.empty()) return absl::OkStatus();
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    out << "{\"grpc_port\": " << grpc_port << ", \"metrics_port\": " << metrics_port
        << ", \"http_port\": 0, \"pid\": " << getpid() << ", \"role\": \"" << role << "\"}\n";
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) return absl::InternalError(absl::StrCat("--ready-file ", path, ": ", ec.message()));
  return absl::OkStatus();
}

absl::Status Coordinator::Impl::StartShared() {
  ServerOptions& o = options;
  // The schema first (migrated under the database's own lock, so that
  // coordinators starting at once agree): the lease lives in it.
  {
    auto stores = OpenStores(o.store, "", nullptr);
    if (!stores.ok()) return stores.status();
  }
  auto credentials = ServerCredentials(o.tls.cert, o.tls.key, o.tls.client_ca);
  if (!credentials.ok()) return credentials.status();

  endpoint = std::make_unique<MetricsEndpoint>(o.metrics_listen);
  if (absl::Status st = endpoint->Start(); !st.ok()) return st;
  o.metrics_endpoint = endpoint.get();

  auto view = std::make_shared<std::function<Leadership::View()>>();
  standby = std::make_unique<StandbyServer>(o.listen, *credentials, [view] {
    const Leadership::View v = (*view)();
    return std::pair<std::string, int64_t>(v.role == Leadership::Role::kLeader ? "" : v.leader_address, v.term);
  });
  *view = [] { return Leadership::View{}; };
  if (absl::Status st = standby->Start(); !st.ok()) return st;
  // Every later server of this process binds the port the standby got.
  const int grpc_port = standby->port();
  o.listen = absl::StrCat(SplitHostPort(o.listen).first, ":", grpc_port);
  const std::string metrics_host = SplitHostPort(o.metrics_listen).first;
  o.metrics_listen = absl::StrCat(metrics_host, ":", endpoint->port());

  LeaseClaim claim;
  std::random_device random;
  claim.holder = absl::StrCat(ThisHost(), ":", getpid(), ":", absl::Hex(random(), absl::kZeroPad8));
  claim.address = Reachable(o.advertise_addr, o.listen, grpc_port);
  claim.http_address = Reachable(SplitHostPort(o.advertise_addr).first, o.metrics_listen, endpoint->port());
  // Statements of the lease give up well within the lease, so that a
  // database that stopped answering is noticed while it still holds.
  const auto bound = std::max(std::chrono::milliseconds(200), o.ha.lease / 3);
  auto connection = pg::Connection::Open(o.store, bound, bound);
  if (!connection.ok()) return connection.status();
  LeadershipOptions lo;
  lo.lease = o.ha.lease;
  lo.renew_every = o.ha.renew_every;
  leadership =
      std::make_unique<Leadership>(std::make_unique<LeaseTable>(std::move(*connection), claim, o.ha.lease), lo);
  *view = [l = leadership.get()] { return l->view(); };
  endpoint->SetReadiness([this]() -> std::pair<bool, std::string> {
    const Leadership::View v = leadership->view();
    bool serving_now = false;
    {
      absl::MutexLock l(&mu);
      serving_now = serving;
    }
    if (v.role == Leadership::Role::kLeader && serving_now) return {true, absl::StrCat("leader, term ", v.term)};
    if (v.role == Leadership::Role::kLeader) return {false, absl::StrCat("leader of term ", v.term, ", starting")};
    return {false, v.leader_address.empty()
                       ? absl::StrCat("standby; no leader yet", v.why.empty() ? "" : " (" + v.why + ")")
                       : absl::StrCat("standby; the leader is at ", v.leader_address, " (term ", v.term, ")")};
  });
  role_metrics = std::make_shared<RoleMetrics>(leadership.get());
  endpoint->Add(role_metrics);
  leadership->Start();
  spdlog::info("trainyard-server: standby on {} (metrics on {}), store {}, lease {} ms, as {}", o.listen,
               o.metrics_listen, pg::Redacted(o.store), o.ha.lease.count(), claim.holder);
  return WriteReadyFile(grpc_port, endpoint->port(), "standby");
}

void Coordinator::Run() {
  Impl& s = *impl_;
  if (s.shared) {
    s.RunShared();
    return;
  }
  Server* server;
  {
    absl::MutexLock l(&s.mu);
    server = s.server.get();
  }
  if (server) server->Wait();
}

void Coordinator::Impl::RunShared() {
  while (true) {
    const std::optional<int64_t> term = leadership->AwaitLeading();
    if (!term) return;
    standby->Stop();
    AwaitPortFree(options.listen);
    ServerOptions so = options;
    so.fence = std::make_shared<Fence>(*term);
    so.fence->OnLost([this, t = *term](int64_t db_term) {
      leadership->StepDown(t, absl::StrCat("a write found term ", db_term, " in the database: another leads"));
    });
    auto next = std::make_unique<Server>(so);
    Server* server = next.get();
    {
      absl::MutexLock l(&mu);
      if (stopping) return;
      this->server = std::move(next);
    }
    absl::Status started = server->Start();
    if (started.ok()) {
      absl::MutexLock l(&mu);
      serving = true;
      spdlog::info("trainyard-server: leading with term {}", *term);
    } else {
      spdlog::error("trainyard-server: the server of term {} did not start: {}", *term, std::string(started.message()));
      leadership->StepDown(*term, absl::StrCat("its server did not start: ", started.message()));
    }
    const std::string why = leadership->AwaitLost(*term);
    std::unique_ptr<Server> ended;
    {
      absl::MutexLock l(&mu);
      if (stopping) return;  // Shutdown stops it
      serving = false;
      ended = std::move(this->server);
    }
    spdlog::warn("trainyard-server: no longer leading (term {}: {}); the jobs go on under the next leader", *term, why);
    // Whatever --on-shutdown says: the next leader adopts the jobs.
    ended->Shutdown(ShutdownMode::kDetach);
    ended.reset();
    AwaitPortFree(options.listen);
    if (absl::Status st = standby->Start(); !st.ok()) {
      spdlog::error("trainyard-server: cannot serve as a standby again: {}", std::string(st.message()));
    }
    WriteReadyFile(standby->port(), endpoint->port(), "standby").IgnoreError();
  }
}

void Coordinator::Shutdown() {
  Impl& s = *impl_;
  // A second caller (main after the signal thread's) waits until the first
  // has finished.
  absl::MutexLock once(&s.shutdown_mu);
  if (s.shut_down) return;
  s.shut_down = true;
  Server* server = nullptr;
  {
    // Once stopping, Run destroys no server: the one held is stopped here
    // and destroyed with the coordinator.
    absl::MutexLock l(&s.mu);
    s.stopping = true;
    s.serving = false;
    server = s.server.get();
  }
  if (server) server->Shutdown();
  if (s.leadership) s.leadership->Stop();  // gives the lease up: a standby takes over now
  if (s.standby) s.standby->Stop();
  if (s.endpoint) s.endpoint->Stop();
}

absl::Status Coordinator::ReloadPolicy() {
  Impl& s = *impl_;
  absl::MutexLock l(&s.mu);
  if (!s.server) return absl::FailedPreconditionError("this coordinator is a standby: the next leader reads the file");
  return s.server->ReloadPolicy();
}

}  // namespace trainyard
