#include "server/store/pg_pool.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace trainyard::pg {

Pool::Pool(std::string url, int size, std::shared_ptr<Fence> fence)
    : url_(std::move(url)), description_(Redacted(url_)), fence_(std::move(fence)), unopened_(size) {}

absl::StatusOr<std::shared_ptr<Pool>> Pool::Open(const std::string& url, int size, std::shared_ptr<Fence> fence) {
  std::shared_ptr<Pool> pool(new Pool(url, std::max(1, size), std::move(fence)));
  auto c = pool->Acquire();
  if (!c.ok()) return c.status();
  pool->Release(*c);
  return pool;
}

absl::StatusOr<Connection*> Pool::Acquire() {
  bool open_new = false;
  Connection* c = nullptr;
  {
    absl::MutexLock lock(&mu_);
    auto available = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !free_.empty() || unopened_ > 0; };
    mu_.Await(absl::Condition(&available));
    if (!free_.empty()) {
      c = free_.back();
      free_.pop_back();
    } else {
      --unopened_;
      open_new = true;
    }
  }
  if (open_new) {
    auto opened = Connection::Open(url_);
    absl::MutexLock lock(&mu_);
    if (!opened.ok()) {
      ++unopened_;
      return opened.status();
    }
    all_.push_back(std::move(*opened));
    return all_.back().get();
  }
  if (c->broken()) {
    if (absl::Status s = c->Reset(); !s.ok()) {
      Release(c);
      return s;
    }
  }
  return c;
}

void Pool::Release(Connection* c) {
  absl::MutexLock lock(&mu_);
  free_.push_back(c);
}

absl::Status Pool::WriteOnce(Connection& c, std::string_view what, const std::function<absl::Status(Connection&)>& body,
                             bool* retry) {
  *retry = false;
  // Before COMMIT is sent nothing can have committed: a connection that
  // breaks until then may run the transaction again.
  auto failed = [&](absl::Status s) {
    if (c.broken()) {
      *retry = true;
    } else {
      c.Exec("ROLLBACK").IgnoreError();  // `s`, the first error, is the one to report
    }
    return s;
  };
  if (auto begin = c.Exec("BEGIN"); !begin.ok()) return failed(begin.status());
  const int64_t term = fence_ ? fence_->term() : 0;
  if (term > 0) {
    auto r = c.Exec("SELECT term FROM trainyard_leader WHERE id = 1 FOR SHARE");
    if (!r.ok()) return failed(r.status());
    const int64_t db_term = r->rows.empty() ? -1 : ParseInt(r->rows[0][0]);
    if (db_term != term) {
      c.Exec("ROLLBACK").IgnoreError();
      fence_->Lost(db_term);
      return absl::FailedPreconditionError(
          absl::StrCat("store write (", std::string(what), ") refused: this coordinator's leader term ", term,
                       " is no longer the database's (term ", db_term, "): another coordinator leads"));
    }
  }
  if (absl::Status s = body(c); !s.ok()) return failed(s);
  auto commit = c.Exec("COMMIT");
  if (!commit.ok()) {
    if (c.broken()) {
      return absl::UnavailableError(absl::StrCat("store write (", std::string(what),
                                                 "): the connection broke during COMMIT; whether it committed is "
                                                 "unknown: ",
                                                 commit.status().message()));
    }
    return commit.status();
  }
  return absl::OkStatus();
}

absl::Status Pool::Write(std::string_view what, const std::function<absl::Status(Connection&)>& body) {
  absl::Status s;
  for (int attempt = 0; attempt < 2; ++attempt) {
    auto c = Acquire();
    if (!c.ok()) return c.status();
    bool retry = false;
    s = WriteOnce(**c, what, body, &retry);
    Release(*c);
    if (!retry) return s;
  }
  return s;
}

absl::Status Pool::Read(const std::function<absl::Status(Connection&)>& body) {
  absl::Status s;
  for (int attempt = 0; attempt < 2; ++attempt) {
    auto c = Acquire();
    if (!c.ok()) return c.status();
    s = body(**c);
    const bool broken = (*c)->broken();
    Release(*c);
    if (!broken) return s;
  }
  return s;
}

}  // namespace trainyard::pg
