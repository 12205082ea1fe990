#include "server/leadership/lease_table.h"

#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "server/store/pg_connection.h"

namespace trainyard {
namespace {

absl::StatusOr<int64_t> Int(const std::optional<std::string>& text, const char* what) {
  int64_t v = 0;
  if (!text || !absl::SimpleAtoi(*text, &v)) {
    return absl::InternalError(absl::StrCat("trainyard_leader.", what, " is not a number"));
  }
  return v;
}

}  // namespace

LeaseTable::LeaseTable(std::unique_ptr<pg::Connection> connection, LeaseClaim claim, std::chrono::milliseconds lease)
    : connection_(std::move(connection)), claim_(std::move(claim)), lease_ms_(absl::StrCat(lease.count())) {}

LeaseTable::~LeaseTable() = default;

absl::StatusOr<pg::Connection*> LeaseTable::Connected() {
  if (connection_->broken()) {
    if (absl::Status st = connection_->Reset(); !st.ok()) return st;
  }
  return connection_.get();
}

absl::StatusOr<std::optional<int64_t>> LeaseTable::TryTake() {
  auto c = Connected();
  if (!c.ok()) return c.status();
  // One statement: the row is locked while it is checked and changed, so of
  // two standbys that try at once one takes the term and the other finds it
  // live.
  auto r = (*c)->Exec(
      "UPDATE trainyard_leader SET term = term + 1, holder = $1, address = $2, http_address = $3, "
      "expires_at = clock_timestamp() + $4 * interval '1 millisecond' "
      "WHERE id = 1 AND expires_at < clock_timestamp() RETURNING term",
      {claim_.holder, claim_.address, claim_.http_address, lease_ms_});
  if (!r.ok()) return r.status();
  if (r->rows.empty()) return std::optional<int64_t>();
  auto term = Int(r->rows[0][0], "term");
  if (!term.ok()) return term.status();
  return std::optional<int64_t>(*term);
}

absl::StatusOr<bool> LeaseTable::Renew(int64_t term) {
  auto c = Connected();
  if (!c.ok()) return c.status();
  auto r = (*c)->Exec(
      "UPDATE trainyard_leader SET expires_at = clock_timestamp() + $3 * interval '1 millisecond' "
      "WHERE id = 1 AND term = $1 AND holder = $2",
      {absl::StrCat(term), claim_.holder, lease_ms_});
  if (!r.ok()) return r.status();
  return r->affected == 1;
}

absl::Status LeaseTable::Resign(int64_t term) {
  auto c = Connected();
  if (!c.ok()) return c.status();
  auto r = (*c)->Exec("UPDATE trainyard_leader SET expires_at = '-infinity' WHERE id = 1 AND term = $1 AND holder = $2",
                      {absl::StrCat(term), claim_.holder});
  return r.status();
}

absl::StatusOr<LeaseRow> LeaseTable::Read() {
  auto c = Connected();
  if (!c.ok()) return c.status();
  auto r = (*c)->Exec(
      "SELECT term, holder, address, http_address, expires_at > clock_timestamp() FROM trainyard_leader WHERE id = 1");
  if (!r.ok()) return r.status();
  if (r->rows.empty()) return absl::FailedPreconditionError("the database has no trainyard_leader row");
  const auto& row = r->rows[0];
  LeaseRow out;
  auto term = Int(row[0], "term");
  if (!term.ok()) return term.status();
  out.term = *term;
  out.holder = row[1].value_or("");
  out.address = row[2].value_or("");
  out.http_address = row[3].value_or("");
  out.live = row[4].value_or("f") == "t";
  return out;
}

}  // namespace trainyard
