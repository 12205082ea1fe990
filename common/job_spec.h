// Forwarding header: the job spec lives in common/spec/ (its tables, parser,
// canonical JSON and reference).
#ifndef TRAINYARD_COMMON_JOB_SPEC_H_
#define TRAINYARD_COMMON_JOB_SPEC_H_

#include "common/spec/job_spec.h"

#endif  // TRAINYARD_COMMON_JOB_SPEC_H_
