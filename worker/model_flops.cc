#include "worker/model_flops.h"

#include <ATen/record_function.h>
#include <torch/csrc/profiler/util.h>

#include <string>

namespace trainyard {
namespace {

thread_local double counted_flops = 0;

std::unique_ptr<at::ObserverContext> CountOp(const at::RecordFunction& fn) {
  auto args = torch::profiler::impl::saveExtraArgs(fn);
  if (!args.empty()) {
    counted_flops += static_cast<double>(torch::profiler::impl::computeFlops(std::string(fn.name()), args));
  }
  return nullptr;
}

}  // namespace

double CountForwardFlops(const std::function<void()>& forward) {
  counted_flops = 0;
  const bool was_enabled = at::isRecordFunctionEnabled();
  at::enableRecordFunction(true);
  const at::CallbackHandle handle = at::addThreadLocalCallback(
      at::RecordFunctionCallback(&CountOp).needsInputs(true).scopes({at::RecordScope::FUNCTION}));
  try {
    forward();
  } catch (...) {
    at::removeCallback(handle);
    at::enableRecordFunction(was_enabled);
    throw;
  }
  at::removeCallback(handle);
  at::enableRecordFunction(was_enabled);
  return counted_flops;
}

}  // namespace trainyard
