// Population-based training (Jaderberg et al., "Population Based Training
// of Neural Networks", 2017; Ray Tune's PopulationBasedTraining): a
// population of max_trials trials trains at once. Each time a member passes
// a multiple of perturbation_interval steps, it is ranked by its latest
// metric among the members that reported one; in the bottom `quantile`
// (and not also in the top), it is exploited — replaced by a new trial that
// resumes from a checkpoint of a member of the top quantile (drawn from the
// seed) with that member's values explored: each value, with
// resample_probability, drawn anew, else a real or integer one times 0.8 or
// 1.2 (kept in its range) and a choice moved to a neighbouring one. The new
// trial is a member from then on; the one it replaced is not.
//
// Its decisions depend on the reports alone, not on what ran before a
// coordinator restart: members are the trials that report (a restarted
// sweep's live trials), each checked first at the interval after its first
// report. Pure logic; not thread-safe.
#ifndef TRAINYARD_SERVER_SWEEPS_PBT_H_
#define TRAINYARD_SERVER_SWEEPS_PBT_H_

#include <memory>
#include <string>
#include <vector>

#include "common/spec/sweep_spec.h"
#include "server/sweeps/searcher.h"

namespace trainyard {

std::unique_ptr<Searcher> MakePbtSearcher(const SweepSpec& sweep);

// PBT's explore step alone: `values` (one per parameter) perturbed, drawn
// from `seed` and the new trial's number.
std::vector<std::string> PbtExplore(const std::vector<SweepParameter>& parameters,
                                    const std::vector<std::string>& values, double resample_probability, uint64_t seed,
                                    int number);

}  // namespace trainyard

#endif  // TRAINYARD_SERVER_SWEEPS_PBT_H_
