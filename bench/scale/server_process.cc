#include "bench/scale/server_process.h"

#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"

namespace trainyard::scale {

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

double P99(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(0.99 * static_cast<double>(v.size())))];
}

ServerProcess::ServerProcess(const std::string& binary, int max_processes, int max_queued, int per_rank_max,
                             std::vector<std::string> extra)
    : binary_(binary) {
  dir_ = std::filesystem::temp_directory_path() / ("trainyard-bench-scale-" + std::to_string(getpid()));
  std::filesystem::remove_all(dir_);
  std::filesystem::create_directories(dir_);
  // The stand-in's pid is kept, to end it with the benchmark (a killed
  // server leaves it).
  const std::string worker = dir_ + "/worker.sh";
  std::ofstream(worker) << "#!/bin/sh\necho $$ >> " << dir_ << "/workers.pid\nexec sleep 1000000\n";
  std::filesystem::permissions(worker, std::filesystem::perms::owner_all);
  args_ = {"--listen",
           "127.0.0.1:0",
           "--metrics-listen",
           "127.0.0.1:0",
           "--http-listen",
           "127.0.0.1:0",
           "--state-dir",
           dir_,
           "--slots",
           "1",
           "--ready-file",
           dir_ + "/ready.json",
           "--max-num-processes",
           std::to_string(max_processes),
           "--max-queued-jobs",
           std::to_string(max_queued),
           "--launcher",
           "external",
           "--worker-binary",
           worker};
  if (per_rank_max > 0) {
    args_.push_back("--metrics-per-rank-max-ranks");
    args_.push_back(std::to_string(per_rank_max));
  }
  args_.insert(args_.end(), extra.begin(), extra.end());
  Start();
}

void ServerProcess::Restart() {
  Kill();
  std::filesystem::remove(dir_ + "/ready.json");
  // On the same ports, so that the ranks' channels find it again.
  for (size_t i = 0; i + 1 < args_.size(); ++i) {
    if (args_[i] == "--listen") args_[i + 1] = "127.0.0.1:" + std::to_string(grpc_port_);
    if (args_[i] == "--metrics-listen") args_[i + 1] = "127.0.0.1:" + std::to_string(metrics_port_);
  }
  grpc_port_ = metrics_port_ = 0;
  Start();
}

void ServerProcess::Kill() {
  kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
}

void ServerProcess::Start() {
  pid_ = fork();
  if (pid_ == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // the server ends with the benchmark, however it ends
    if (FILE* log = std::fopen((dir_ + "/server.log").c_str(), "a")) {
      dup2(fileno(log), STDOUT_FILENO);
      dup2(fileno(log), STDERR_FILENO);
    }
    std::vector<char*> argv = {const_cast<char*>(binary_.c_str())};
    for (std::string& a : args_) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(binary_.c_str(), argv.data());
    _exit(127);
  }
  for (int i = 0; i < 600 && grpc_port_ == 0; ++i) {
    std::ifstream ready(dir_ + "/ready.json");
    auto j = nlohmann::json::parse(ready, nullptr, false);
    // Over a shared store a coordinator serves as a standby first: wait
    // until it leads.
    if (!j.is_discarded() && j.contains("grpc_port") && j.value("role", "") != "standby") {
      grpc_port_ = j["grpc_port"].get<int>();
      metrics_port_ = j["metrics_port"].get<int>();
      http_port_ = j.value("http_port", 0);
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  if (grpc_port_ == 0) throw std::runtime_error("the server did not start; see " + dir_ + "/server.log");
}

ServerProcess::~ServerProcess() {
  Kill();
  std::ifstream pids(dir_ + "/workers.pid");
  for (pid_t p = 0; pids >> p;) kill(p, SIGKILL);
  std::filesystem::remove_all(dir_);
}

double ServerProcess::CpuSeconds() const {
  std::ifstream f("/proc/" + std::to_string(pid_) + "/stat");
  std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const size_t close = text.rfind(')');
  if (close == std::string::npos) return 0;
  std::vector<std::string> fields = absl::StrSplit(text.substr(close + 2), ' ');
  double utime = 0, stime = 0;  // fields 14 and 15 of stat: here 11 and 12
  if (fields.size() < 13 || !absl::SimpleAtod(fields[11], &utime) || !absl::SimpleAtod(fields[12], &stime)) return 0;
  return (utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

int64_t ServerProcess::Status(const std::string& key) const {
  std::ifstream f("/proc/" + std::to_string(pid_) + "/status");
  for (std::string line; std::getline(f, line);) {
    if (line.rfind(key + ":", 0) != 0) continue;
    int64_t v = 0;
    std::istringstream(line.substr(key.size() + 1)) >> v;
    return v;
  }
  return 0;
}

int64_t ServerProcess::OpenFiles() const {
  std::error_code ec;
  int64_t n = 0;
  for (std::filesystem::directory_iterator it("/proc/" + std::to_string(pid_) + "/fd", ec), end; !ec && it != end;
       it.increment(ec)) {
    ++n;
  }
  return n;
}

HttpReply Http(int port, const std::string& method, const std::string& path, const std::string& headers,
               const std::string& body) {
  HttpReply out;
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    close(fd);
    return out;
  }
  const std::string req = method + " " + path + " HTTP/1.0\r\nHost: 127.0.0.1:" + std::to_string(port) + "\r\n" +
                          headers + "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  if (write(fd, req.data(), req.size()) != static_cast<ssize_t>(req.size())) {
    close(fd);
    return out;
  }
  std::string text;
  char buf[1 << 16];
  for (ssize_t n; (n = read(fd, buf, sizeof(buf))) > 0;) text.append(buf, static_cast<size_t>(n));
  close(fd);
  const size_t end = text.find("\r\n\r\n");
  if (end == std::string::npos || text.size() < 12) return out;
  absl::SimpleAtoi(text.substr(9, 3), &out.status);
  out.headers = text.substr(0, end);
  out.body = text.substr(end + 4);
  return out;
}

Scrape ScrapeMetrics(int port) {
  Scrape out;
  const auto t0 = Clock::now();
  HttpReply r = Http(port, "GET", "/metrics");
  out.seconds = Seconds(Clock::now() - t0);
  if (r.status != 200) return out;
  out.bytes = r.body.size();
  for (absl::string_view line : absl::StrSplit(r.body, '\n')) {
    if (!line.empty() && line[0] != '#') ++out.series;
  }
  out.body = std::move(r.body);
  return out;
}

WebUi::WebUi(int port) : port_(port) {
  const HttpReply r =
      Http(port, "POST", "/ui/api/login", "Content-Type: application/json\r\n", R"({"token": "bench"})");
  if (r.status != 200) return;
  const size_t at = r.headers.find("Set-Cookie: ");
  if (at == std::string::npos) return;
  cookie_ = r.headers.substr(at + 12, r.headers.find(';', at) - at - 12);
  auto j = nlohmann::json::parse(r.body, nullptr, false);
  if (!j.is_discarded() && j.contains("csrf")) csrf_ = j["csrf"].get<std::string>();
}

int WebUi::Call(const std::string& method, const std::string& json) {
  return Http(port_, "POST", "/ui/api/v1/" + method,
              "Content-Type: application/json\r\nCookie: " + cookie_ + "\r\nX-CSRF-Token: " + csrf_ + "\r\n", json)
      .status;
}

std::unique_ptr<v1::JobService::Stub> JobStub(const std::string& addr) {
  return v1::JobService::NewStub(grpc::CreateChannel(addr, grpc::InsecureChannelCredentials()));
}

v1::Job TimedGetJob(v1::JobService::Stub* stub, const std::string& id, double* ms) {
  grpc::ClientContext ctx;
  v1::GetJobRequest req;
  req.set_id(id);
  v1::GetJobResponse resp;
  const auto t0 = Clock::now();
  stub->GetJob(&ctx, req, &resp);
  if (ms != nullptr) *ms = Seconds(Clock::now() - t0) * 1e3;
  return resp.job();
}

std::string Submit(v1::JobService::Stub* stub, const std::string& spec, std::string* error) {
  v1::SubmitJobRequest submit;
  submit.set_spec(spec);
  v1::SubmitJobResponse submitted;
  grpc::ClientContext ctx;
  if (auto st = stub->SubmitJob(&ctx, submit, &submitted); !st.ok()) {
    *error = "submit: " + st.error_message();
    return "";
  }
  return submitted.job().id();
}

std::string JoinToken(v1::JobService::Stub* stub, const std::string& id) {
  v1::GetJoinInfoResponse join;
  for (int i = 0; i < 100; ++i) {
    grpc::ClientContext ctx;
    v1::GetJoinInfoRequest req;
    req.set_id(id);
    if (stub->GetJoinInfo(&ctx, req, &join).ok()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return join.token();
}

void CancelJob(v1::JobService::Stub* stub, const std::string& id) {
  grpc::ClientContext ctx;
  v1::CancelJobRequest req;
  req.set_id(id);
  v1::CancelJobResponse resp;
  stub->CancelJob(&ctx, req, &resp);
}

}  // namespace trainyard::scale
