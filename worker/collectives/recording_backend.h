// RecordingBackend: a c10d::Backend that hands every call to the backend it
// wraps (Gloo or NCCL) and records each collective in a FlightRecorder —
// when it started, and when its Work's future completed. MakeProcessGroup
// registers it in place of the real backend, so DDP's Reducer, the comm
// hooks, FSDP's collectives and the step control word are all recorded.
//
// On NCCL a collective's future completes once the collective is enqueued on
// its stream, so "finished" there means "handed to the GPU"; a hang is still
// told apart by the ranks' collective numbers.
#ifndef TRAINYARD_WORKER_COLLECTIVES_RECORDING_BACKEND_H_
#define TRAINYARD_WORKER_COLLECTIVES_RECORDING_BACKEND_H_

#include <torch/csrc/distributed/c10d/Backend.hpp>

#include <string>

#include "worker/base/flight_recorder.h"

namespace trainyard {

// `recorder` must outlive the backend and every Work it returns.
c10::intrusive_ptr<c10d::Backend> MakeRecordingBackend(c10::intrusive_ptr<c10d::Backend> inner,
                                                       FlightRecorder* recorder, const std::string& group);

}  // namespace trainyard

#endif  // TRAINYARD_WORKER_COLLECTIVES_RECORDING_BACKEND_H_
