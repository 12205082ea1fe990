// bench/history: what a job's history (server/jobs/job_history.h) costs the
// coordinator per step: the CPU of JobHistory::Add for one lead sample (all
// nine series), the bytes it holds and saves, and the time to save and to
// read it back — for jobs of 1,000 to 1,000,000 steps. bench/web_ui.py puts
// the CPU next to what the whole server spends per step.
//
//   history [--steps 1000,10000,100000,1000000]
#include <CLI/CLI.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "server/jobs/job_history.h"

namespace {

double Seconds(std::chrono::steady_clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

int main(int argc, char** argv) {
  std::vector<int64_t> steps{1000, 10000, 100000, 1000000};
  CLI::App app{"bench/history: the cost of a job's history per step"};
  app.add_option("--steps", steps, "Job lengths")->delimiter(',');
  CLI11_PARSE(app, argc, argv);
  std::printf("command: history --steps");
  for (size_t i = 0; i < steps.size(); ++i) std::printf("%s%lld", i ? "," : " ", static_cast<long long>(steps[i]));
  std::printf(
      "\n\n| steps | Add, ns per step (9 series) | points kept (loss) | saved bytes | saved bytes per step "
      "| save (encode) ms | read back (decode) ms |\n|---|---|---|---|---|---|---|\n");
  for (int64_t n : steps) {
    trainyard::JobHistory h;
    trainyard::StepMetrics m;
    m.param_bytes = 1 << 20;
    m.model_flops = 1e9;
    m.peak_flops = 1e12;
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t i = 1; i <= n; ++i) {
      m.step = i;
      m.unix_millis = 1'700'000'000'000 + i;
      m.loss = 2.0 * std::exp(-static_cast<double>(i) / static_cast<double>(n)) + 0.01 * std::sin(i * 0.37);
      m.samples_per_second = 1000 + (i % 17);
      m.step_seconds = 0.001 + 1e-5 * (i % 7);
      m.learning_rate = 1e-3 * (1 - static_cast<double>(i) / static_cast<double>(n + 1));
      m.grad_norm = 1.0 + 0.1 * std::cos(i * 0.11);
      m.eval_loss = i % 100 == 0 ? m.loss : std::nan("");
      h.Add(m, 2);
    }
    const double add = Seconds(std::chrono::steady_clock::now() - t0);
    const auto t1 = std::chrono::steady_clock::now();
    const std::string saved = h.Encode();
    const double encode = Seconds(std::chrono::steady_clock::now() - t1);
    const auto t2 = std::chrono::steady_clock::now();
    auto back = trainyard::JobHistory::Decode(saved);
    const double decode = Seconds(std::chrono::steady_clock::now() - t2);
    if (!back.ok()) {
      std::fprintf(stderr, "decode failed: %s\n", std::string(back.status().message()).c_str());
      return 1;
    }
    std::printf("| %lld | %.0f | %zu | %zu | %.2f | %.2f | %.2f |\n", static_cast<long long>(n), add / n * 1e9,
                h.series().at("loss").points().size(), saved.size(), static_cast<double>(saved.size()) / n,
                encode * 1e3, decode * 1e3);
  }
  return 0;
}
