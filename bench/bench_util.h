// Helpers shared by the benchmark programs: statistics over steps and
// running ranks as child processes.
#ifndef TRAINYARD_BENCH_BENCH_UTIL_H_
#define TRAINYARD_BENCH_BENCH_UTIL_H_

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace trainyard::bench {

struct Stats {
  double mean = 0, median = 0, p90 = 0, std = 0, cv = 0, min = 0, max = 0;
  size_t count = 0;
};
Stats Summarize(std::vector<double> values);

// Runs one process per argv in `argvs` (rank r gets argvs[r], with RANK,
// WORLD_SIZE, MASTER_ADDR=`master_addr`, MASTER_PORT and OMP_NUM_THREADS=1 in
// its environment), waits for all, and returns rank 0's last stdout line
// that parses as a JSON object. Throws when a rank fails.
nlohmann::json RunRanks(const std::vector<std::vector<std::string>>& argvs,
                        const std::string& master_addr = "127.0.0.1");

}  // namespace trainyard::bench

#endif  // TRAINYARD_BENCH_BENCH_UTIL_H_
