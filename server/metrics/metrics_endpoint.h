// MetricsEndpoint: the coordinator's HTTP port for Prometheus and for load
// balancers (--metrics-listen):
//   GET /metrics  every added collectable in Prometheus' text format
//   GET /livez    200 while the process serves (leader or standby)
//   GET /readyz   200 when the readiness callback says so (the leader,
//                 serving); 503 with its reason otherwise
// It outlives the coordinator's role: a standby serves it too, so that a load
// balancer and Prometheus see every coordinator. Thread-safe.
#ifndef TRAINYARD_SERVER_METRICS_METRICS_ENDPOINT_H_
#define TRAINYARD_SERVER_METRICS_METRICS_ENDPOINT_H_

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

struct mg_context;
struct mg_connection;
namespace prometheus {
class Collectable;
}

namespace trainyard {

class MetricsEndpoint {
 public:
  // Ready or not, and why (the body of /readyz).
  using Readiness = std::function<std::pair<bool, std::string>()>;

  explicit MetricsEndpoint(std::string listen);
  ~MetricsEndpoint();  // Stop()

  // UNAVAILABLE naming --metrics-listen when it cannot listen there.
  absl::Status Start();
  void Stop();
  int port() const;

  void Add(const std::shared_ptr<prometheus::Collectable>& collectable);
  void Remove(const std::shared_ptr<prometheus::Collectable>& collectable);
  // Default: ready once started.
  void SetReadiness(Readiness readiness);

 private:
  static int Handle(mg_connection* conn, void* self);
  int Serve(mg_connection* conn);

  const std::string listen_;
  mg_context* ctx_ = nullptr;
  int port_ = 0;
  mutable absl::Mutex mu_;
  std::vector<std::weak_ptr<prometheus::Collectable>> collectables_ ABSL_GUARDED_BY(mu_);
  Readiness readiness_ ABSL_GUARDED_BY(mu_);
};

}  // namespace trainyard

#endif  // TRAINYARD_SERVER_METRICS_METRICS_ENDPOINT_H_
