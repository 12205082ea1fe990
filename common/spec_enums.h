// Forwarding header: the spec's enumerations live in common/spec/.
#ifndef TRAINYARD_COMMON_SPEC_ENUMS_H_
#define TRAINYARD_COMMON_SPEC_ENUMS_H_

#include "common/spec/spec_enums.h"

#endif  // TRAINYARD_COMMON_SPEC_ENUMS_H_
