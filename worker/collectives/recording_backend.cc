#include "worker/collectives/recording_backend.h"

#include <torch/version.h>

#include <ATen/core/ivalue.h>

#include <utility>
#include <vector>

namespace trainyard {
namespace {

int64_t InputBytes(const at::Tensor& t) { return t.defined() ? static_cast<int64_t>(t.nbytes()) : 0; }
int64_t InputBytes(const std::vector<at::Tensor>& ts) {
  int64_t n = 0;
  for (const at::Tensor& t : ts) n += InputBytes(t);
  return n;
}
int64_t InputBytes(const std::vector<std::vector<at::Tensor>>& tss) {
  int64_t n = 0;
  for (const auto& ts : tss) n += InputBytes(ts);
  return n;
}

class RecordingBackend final : public c10d::Backend {
 public:
  RecordingBackend(c10::intrusive_ptr<c10d::Backend> inner, FlightRecorder* recorder, std::string group)
      : Backend(inner->getRank(), inner->getSize()),
        inner_(std::move(inner)),
        recorder_(recorder),
        group_(std::move(group)) {}

  const std::string getBackendName() const override { return inner_->getBackendName(); }
  c10::intrusive_ptr<Options> getBackendOptions() override { return inner_->getBackendOptions(); }
  bool supportsSplitting() const override { return false; }
  bool supportsCoalescing() const override { return inner_->supportsCoalescing(); }
  void startCoalescing() override { inner_->startCoalescing(); }
  c10::intrusive_ptr<c10d::Work> endCoalescing() override { return inner_->endCoalescing(); }
  void setTimeout(std::chrono::milliseconds timeout) override { inner_->setTimeout(timeout); }
  void setSequenceNumberForGroup() override { inner_->setSequenceNumberForGroup(); }
  uint64_t getSequenceNumberForGroup() override { return inner_->getSequenceNumberForGroup(); }
#if TORCH_VERSION_MAJOR > 2 || TORCH_VERSION_MINOR >= 15  // virtual since; torch 2.11's are not
  std::optional<at::Device> getBoundDeviceId() const override { return inner_->getBoundDeviceId(); }
  void setBoundDeviceId(std::optional<at::Device> device) override { inner_->setBoundDeviceId(device); }
#endif
  void eagerConnectSingleDevice(at::Device device) override { inner_->eagerConnectSingleDevice(device); }
  void waitForPendingWorks() override { inner_->waitForPendingWorks(); }
  c10d::ErrorType getError() override { return inner_->getError(); }
  void abort() override { inner_->abort(); }
  void shutdown() override { inner_->shutdown(); }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override {
    return Record("broadcast", InputBytes(tensors), [&] { return inner_->broadcast(tensors, opts); });
  }
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override {
    return Record("allreduce", InputBytes(tensors), [&] { return inner_->allreduce(tensors, opts); });
  }
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                     const c10d::AllreduceCoalescedOptions& opts) override {
    return Record("allreduce_coalesced", InputBytes(tensors),
                  [&] { return inner_->allreduce_coalesced(tensors, opts); });
  }
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) override {
    return Record("reduce", InputBytes(tensors), [&] { return inner_->reduce(tensors, opts); });
  }
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override {
    return Record("allgather", InputBytes(inputs), [&] { return inner_->allgather(outputs, inputs, opts); });
  }
  // Each pair of names (the canonical `_single` one and its older alias) is
  // forwarded name for name, so the wrapped backend's own forwarding between
  // them never re-enters.
#ifdef C10D_BACKEND_FORWARDING_GUARD  // the `_single` names (newer LibTorch)
  c10::intrusive_ptr<c10d::Work> all_gather_single(at::Tensor& output, at::Tensor& input,
                                                   const c10d::AllgatherOptions& opts) override {
    return Record("allgather", InputBytes(input), [&] { return inner_->all_gather_single(output, input, opts); });
  }
#endif
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override {
    return Record("allgather", InputBytes(input), [&] { return inner_->_allgather_base(output, input, opts); });
  }
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllgatherOptions& opts) override {
    return Record("allgather_coalesced", InputBytes(inputs),
                  [&] { return inner_->allgather_coalesced(outputs, inputs, opts); });
  }
#ifdef C10D_BACKEND_FORWARDING_GUARD  // the `_single` names (newer LibTorch)
  c10::intrusive_ptr<c10d::Work> all_gather_single_coalesced(std::vector<at::Tensor>& outputs,
                                                             std::vector<at::Tensor>& inputs,
                                                             const c10d::AllgatherOptions& opts) override {
    return Record("allgather_coalesced", InputBytes(inputs),
                  [&] { return inner_->all_gather_single_coalesced(outputs, inputs, opts); });
  }
#endif
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::AllgatherOptions& opts) override {
    return Record("allgather_coalesced", InputBytes(inputs),
                  [&] { return inner_->allgather_into_tensor_coalesced(outputs, inputs, opts); });
  }
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override {
    return Record("gather", InputBytes(inputs), [&] { return inner_->gather(outputs, inputs, opts); });
  }
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override {
    return Record("scatter", InputBytes(inputs), [&] { return inner_->scatter(outputs, inputs, opts); });
  }
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override {
    return Record("reduce_scatter", InputBytes(inputs), [&] { return inner_->reduce_scatter(outputs, inputs, opts); });
  }
#ifdef C10D_BACKEND_FORWARDING_GUARD  // the `_single` names (newer LibTorch)
  c10::intrusive_ptr<c10d::Work> reduce_scatter_single(at::Tensor& output, at::Tensor& input,
                                                       const c10d::ReduceScatterOptions& opts) override {
    return Record("reduce_scatter", InputBytes(input),
                  [&] { return inner_->reduce_scatter_single(output, input, opts); });
  }
#endif
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                      const c10d::ReduceScatterOptions& opts) override {
    return Record("reduce_scatter", InputBytes(input),
                  [&] { return inner_->_reduce_scatter_base(output, input, opts); });
  }
#ifdef C10D_BACKEND_FORWARDING_GUARD  // the `_single` names (newer LibTorch)
  c10::intrusive_ptr<c10d::Work> reduce_scatter_single_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::ReduceScatterOptions& opts) override {
    return Record("reduce_scatter_coalesced", InputBytes(inputs),
                  [&] { return inner_->reduce_scatter_single_coalesced(outputs, inputs, opts); });
  }
#endif
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::ReduceScatterOptions& opts) override {
    return Record("reduce_scatter_coalesced", InputBytes(inputs),
                  [&] { return inner_->reduce_scatter_tensor_coalesced(outputs, inputs, opts); });
  }
#ifdef C10D_BACKEND_FORWARDING_GUARD  // the `_single` names (newer LibTorch)
  c10::intrusive_ptr<c10d::Work> all_to_all_single(at::Tensor& output, at::Tensor& input,
                                                   std::vector<int64_t>& output_splits,
                                                   std::vector<int64_t>& input_splits,
                                                   const c10d::AllToAllOptions& opts) override {
    return Record("alltoall", InputBytes(input),
                  [&] { return inner_->all_to_all_single(output, input, output_splits, input_splits, opts); });
  }
#endif
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_splits, std::vector<int64_t>& input_splits,
                                               const c10d::AllToAllOptions& opts) override {
    return Record("alltoall", InputBytes(input),
                  [&] { return inner_->alltoall_base(output, input, output_splits, input_splits, opts); });
  }
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override {
    return Record("alltoall", InputBytes(inputs), [&] { return inner_->alltoall(outputs, inputs, opts); });
  }
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override {
    return Record("barrier", 0, [&] { return inner_->barrier(opts); });
  }
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) override {
    RecordedCollective r(recorder_, group_, "monitored_barrier", 0);
    inner_->monitoredBarrier(opts, wait_all_ranks);
  }
  // Point-to-point calls are not collectives: not numbered, not recorded.
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override {
    return inner_->send(tensors, dst, tag);
  }
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override {
    return inner_->recv(tensors, src, tag);
  }
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override {
    return inner_->recvAnysource(tensors, tag);
  }

 private:
  template <typename Call>
  c10::intrusive_ptr<c10d::Work> Record(const char* op, int64_t bytes, Call&& call) {
    const uint64_t handle = recorder_->Begin(group_, op, bytes);
    c10::intrusive_ptr<c10d::Work> work;
    try {
      work = call();
    } catch (...) {
      recorder_->End(handle);
      throw;
    }
    c10::intrusive_ptr<c10::ivalue::Future> future;
    try {
      future = work->getFuture();
    } catch (const c10::Error&) {
      // A Work without a future: its end is not observed.
    }
    if (future) {
      FlightRecorder* recorder = recorder_;
      future->addCallback([recorder, handle](c10::ivalue::Future&) { recorder->End(handle); },
                          /*uses_future=*/false);
    }
    return work;
  }

  c10::intrusive_ptr<c10d::Backend> inner_;
  FlightRecorder* const recorder_;
  const std::string group_;
};

}  // namespace

c10::intrusive_ptr<c10d::Backend> MakeRecordingBackend(c10::intrusive_ptr<c10d::Backend> inner,
                                                       FlightRecorder* recorder, const std::string& group) {
  return c10::make_intrusive<RecordingBackend>(std::move(inner), recorder, group);
}

}  // namespace trainyard
