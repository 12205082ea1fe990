#include "worker/script/script_channel.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <utility>

#include "absl/strings/str_cat.h"

namespace trainyard {
namespace {

using ChannelJson = nlohmann::ordered_json;  // keys in the order the package writes them

template <typename T>
std::optional<T> ChannelNumber(const ChannelJson& m, const char* key) {
  auto it = m.find(key);
  if (it == m.end() || !it->is_number()) return std::nullopt;
  return it->get<T>();
}

template <typename T>
ChannelJson ChannelOrNull(const std::optional<T>& v) {
  return v ? ChannelJson(*v) : ChannelJson(nullptr);
}

}  // namespace

std::optional<ScriptMessage> ParseScriptMessage(std::string_view line) {
  const ChannelJson m = ChannelJson::parse(line, nullptr, /*allow_exceptions=*/false);
  if (!m.is_object()) return std::nullopt;
  const auto op_it = m.find("op");
  const std::string op = op_it != m.end() && op_it->is_string() ? op_it->get<std::string>() : "";
  if (op == "hello") return ScriptHello{};
  if (op == "report") {
    ScriptReport r;
    r.step = ChannelNumber<int64_t>(m, "step").value_or(0);
    r.samples = ChannelNumber<int64_t>(m, "samples");
    r.loss = ChannelNumber<double>(m, "loss");
    r.seconds = ChannelNumber<double>(m, "seconds");
    r.total = ChannelNumber<int64_t>(m, "total");
    const auto values = m.find("values");
    if (values != m.end() && values->is_object()) {
      for (const auto& [name, v] : values->items()) {
        if (v.is_number()) r.values[name] = v.get<double>();
      }
    }
    return r;
  }
  if (op == "saved") {
    ScriptSaved s;
    const auto path = m.find("path");
    if (path != m.end() && path->is_string()) s.path = path->get<std::string>();
    s.step = ChannelNumber<int64_t>(m, "step");
    s.request_id = ChannelNumber<int64_t>(m, "request_id").value_or(0);
    return s;
  }
  return ScriptUnknown{op};
}

std::string ScriptMessageLine(const ScriptMessage& message) {
  ChannelJson j;
  if (std::holds_alternative<ScriptHello>(message)) {
    j = {{"op", "hello"}};
  } else if (const auto* r = std::get_if<ScriptReport>(&message)) {
    ChannelJson values = ChannelJson::object();
    for (const auto& [name, v] : r->values) values[name] = v;
    j = {{"op", "report"},
         {"step", r->step},
         {"samples", ChannelOrNull(r->samples)},
         {"loss", ChannelOrNull(r->loss)},
         {"seconds", ChannelOrNull(r->seconds)},
         {"values", values}};
    if (r->total) j["total"] = *r->total;  // only when given: older packages' lines stay as they were
  } else if (const auto* s = std::get_if<ScriptSaved>(&message)) {
    j = {{"op", "saved"}, {"path", s->path}, {"step", ChannelOrNull(s->step)}, {"request_id", s->request_id}};
  } else {
    j = {{"op", std::get<ScriptUnknown>(message).op}};
  }
  return j.dump() + "\n";
}

std::string ScriptStateLine(const ScriptState& s) {
  ChannelJson checkpoint = nullptr;
  if (s.checkpoint) checkpoint = *s.checkpoint == CheckpointType::kSharded ? "sharded" : "full";
  return ChannelJson{{"checkpoint", checkpoint}, {"request_id", s.request_id}, {"stop", s.stop}}.dump() + "\n";
}

std::optional<ScriptState> ParseScriptState(std::string_view line) {
  const ChannelJson j = ChannelJson::parse(line, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return std::nullopt;
  ScriptState s;
  const auto checkpoint = j.find("checkpoint");
  if (checkpoint != j.end() && checkpoint->is_string()) {
    s.checkpoint = checkpoint->get<std::string>() == "sharded" ? CheckpointType::kSharded : CheckpointType::kFull;
  }
  s.request_id = ChannelNumber<int64_t>(j, "request_id").value_or(0);
  const auto stop = j.find("stop");
  s.stop = stop != j.end() && stop->is_boolean() && stop->get<bool>();
  return s;
}

absl::StatusOr<ScriptChannel> ScriptChannel::Open() {
  int ends[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ends) != 0) {
    return absl::InternalError(absl::StrCat("socketpair: ", std::strerror(errno)));
  }
  fcntl(ends[0], F_SETFL, O_NONBLOCK);
  return ScriptChannel(ends[0], ends[1]);
}

ScriptChannel::ScriptChannel(ScriptChannel&& other) noexcept { *this = std::move(other); }

ScriptChannel& ScriptChannel::operator=(ScriptChannel&& other) noexcept {
  if (this == &other) return *this;
  Close();
  fd_ = std::exchange(other.fd_, -1);
  script_end_ = std::exchange(other.script_end_, -1);
  open_ = std::exchange(other.open_, false);
  inbox_ = std::move(other.inbox_);
  return *this;
}

ScriptChannel::~ScriptChannel() { Close(); }

void ScriptChannel::Close() {
  if (fd_ >= 0) close(fd_);
  CloseScriptEnd();
  fd_ = -1;
}

void ScriptChannel::CloseScriptEnd() {
  if (script_end_ >= 0) close(script_end_);
  script_end_ = -1;
}

std::vector<ScriptMessage> ScriptChannel::Read() {
  std::vector<ScriptMessage> messages;
  if (fd_ < 0 || !open_) return messages;
  char buf[65536];
  for (;;) {
    const ssize_t n = read(fd_, buf, sizeof(buf));
    if (n > 0) {
      inbox_.append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n == 0) open_ = false;  // the script (and its children) closed it
    if (n < 0 && errno == EINTR) continue;
    break;
  }
  for (size_t at; (at = inbox_.find('\n')) != std::string::npos;) {
    std::optional<ScriptMessage> m = ParseScriptMessage(std::string_view(inbox_).substr(0, at));
    inbox_.erase(0, at + 1);
    if (m) messages.push_back(std::move(*m));
  }
  return messages;
}

void ScriptChannel::Send(const ScriptState& s) {
  if (fd_ < 0) return;
  const std::string line = ScriptStateLine(s);
  // Small and rare: a blocking write is fine (the socket buffer holds it).
  fcntl(fd_, F_SETFL, 0);
  (void)!write(fd_, line.data(), line.size());
  fcntl(fd_, F_SETFL, O_NONBLOCK);
}

}  // namespace trainyard
