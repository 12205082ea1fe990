#include "worker/train/step_guard.h"

#include "worker/train/trainer_parts.h"

namespace trainyard {
namespace {

class WholeGroupGuard final : public StepGuard {
 public:
  WholeGroupGuard(int32_t rank, int32_t world_size, DistContext dist)
      : seat_{std::move(dist), rank, world_size, rank, world_size} {}

  TrainerSeat Seat() override { return seat_; }
  void Start(TrainerParts* parts) override {
    parts_ = parts;
    parts_->step = parts_->checkpoints->AgreeAndRestore();
  }
  bool Next() override { return parts_->step < parts_->spec.max_steps; }
  int64_t Position() const override { return parts_->step; }

 private:
  TrainerSeat seat_;
  TrainerParts* parts_ = nullptr;
};

}  // namespace

std::unique_ptr<StepGuard> MakeWholeGroupGuard(int32_t rank, int32_t world_size, DistContext dist) {
  return std::make_unique<WholeGroupGuard>(rank, world_size, std::move(dist));
}

}  // namespace trainyard
