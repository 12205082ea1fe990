#include "server/store/stores.h"

#include <filesystem>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "server/store/pg_connection.h"
#include "server/store/pg_pool.h"
#include "server/store/pg_schema.h"
#include "server/store/pg_stores.h"

namespace trainyard {

absl::StatusOr<Stores> OpenStores(const std::string& url, const std::string& default_sqlite_path,
                                  std::shared_ptr<Fence> fence) {
  Stores out;
  if (pg::IsPostgresUrl(url)) {
    auto pool = pg::Pool::Open(url, /*size=*/4, std::move(fence));
    if (!pool.ok()) return pool.status();
    if (absl::Status s = (*pool)->Read([](pg::Connection& c) { return pg::Migrate(c); }); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat((*pool)->description(), ": ", s.message()));
    }
    out.jobs = NewPgJobStore(*pool);
    out.sweeps = NewPgSweepStore(*pool);
    out.description = (*pool)->description();
    out.shared = true;
    return out;
  }
  std::string path;
  if (url.empty()) {
    path = default_sqlite_path;
  } else if (absl::StartsWith(url, "sqlite:") && url.size() > 7) {
    path = url.substr(7);
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--store '", pg::Redacted(url),
                     "': expected sqlite:PATH, postgresql://USER@HOST:PORT/DATABASE (or postgres://...), or nothing "
                     "for SQLite in the state directory"));
  }
  std::error_code ec;
  const std::filesystem::path absolute = std::filesystem::absolute(path, ec);
  if (!ec) path = absolute.lexically_normal().string();
  auto jobs = JobStore::Open(path);
  if (!jobs.ok()) return jobs.status();
  auto sweeps = SweepStore::Open(path);
  if (!sweeps.ok()) return sweeps.status();
  out.jobs = std::move(*jobs);
  out.sweeps = std::move(*sweeps);
  out.description = "sqlite:" + path;
  return out;
}

}  // namespace trainyard
