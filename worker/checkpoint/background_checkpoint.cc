#include "worker/checkpoint/background_checkpoint.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "common/clock.h"
#include "common/log.h"
#include "worker/checkpoint/checkpoint_internal.h"
#include "worker/checkpoint/checkpoint_output.h"

namespace trainyard {
using namespace checkpoint_internal;  // NOLINT: part of the checkpoint code

namespace {
std::mutex write_hook_mu;
std::function<void(int32_t, const std::string&)> write_hook;
}  // namespace

void SetBackgroundWriteHookForTesting(std::function<void(int32_t, const std::string&)> hook) {
  std::lock_guard<std::mutex> lock(write_hook_mu);
  write_hook = std::move(hook);
}

struct AsyncCheckpointer::Save {
  SaveBegun begun;
  HostCopyOutput copy;
  std::string trigger;
  int64_t request_id = 0;
  double blocking_seconds = 0;
  int64_t host_bytes = 0;
  std::thread thread;

  std::mutex mu;
  std::condition_variable cv;
  bool written = false;  // this rank's files are written (or failed)
  std::string write_error;
  bool resolved = false;  // the ranks agreed how the save ends
  bool abandoned = false;
  int32_t failed_rank = -1;
  bool done = false;  // nothing left to do on this rank
  CheckpointEvent event;
};

AsyncCheckpointer::AsyncCheckpointer(int32_t rank) : rank_(rank) {}

AsyncCheckpointer::~AsyncCheckpointer() {
  if (!save_) return;
  {
    std::lock_guard<std::mutex> lock(save_->mu);
    if (!save_->resolved) save_->abandoned = true;
    save_->resolved = true;
  }
  save_->cv.notify_all();
  if (save_->thread.joinable()) save_->thread.join();
}

SaveProgress AsyncCheckpointer::progress() const {
  if (!save_) return SaveProgress::kNone;
  std::lock_guard<std::mutex> lock(save_->mu);
  if (save_->resolved) return SaveProgress::kNone;
  if (!save_->written) return SaveProgress::kWriting;
  return save_->write_error.empty() ? SaveProgress::kWritten : SaveProgress::kFailed;
}

std::optional<CheckpointEvent> AsyncCheckpointer::Start(const TrainingState& state, CheckpointType type,
                                                        const CheckpointTarget& target, const std::string& trigger,
                                                        int64_t request_id) {
  if (save_) throw std::logic_error("AsyncCheckpointer::Start with a save in flight (Drain first)");
  if (type == CheckpointType::kAuto) type = CheckpointType::kFull;
  auto save = std::make_unique<Save>();
  save->trigger = trigger;
  save->request_id = request_id;
  save->begun = BeginSave(state, type, target);
  auto failed_event = [&](CheckpointEvent ev) {
    ev.trigger = trigger;
    ev.request_id = request_id;
    ev.blocking_seconds = ev.seconds;
    return ev;
  };
  if (save->begun.failed) return failed_event(save->begun.event);
  std::string error;
  try {
    WriteCheckpointFiles(state, save->begun.type, target.index, save->begun.commit.staging, save->copy);
  } catch (const std::exception& e) {
    error = e.what();
  }
  if (int32_t failed = FirstFailure(state, error.empty()); failed >= 0) {
    return failed_event(FailSave(save->begun, rank_, failed, error));
  }
  save->host_bytes = save->copy.host_bytes();
  save->blocking_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - save->begun.start).count();
  Save* s = save.get();
  const int32_t rank = rank_;
  s->thread = std::thread([s, rank] {
    // Below the training threads: the write takes the cycles they leave.
    ::setpriority(PRIO_PROCESS, static_cast<id_t>(::syscall(SYS_gettid)), 10);
    std::string err;
    try {
      std::function<void(int32_t, const std::string&)> hook;
      {
        std::lock_guard<std::mutex> lock(write_hook_mu);
        hook = write_hook;
      }
      if (hook) hook(rank, s->begun.commit.staging);
      s->copy.Flush();
    } catch (const std::exception& e) {
      err = e.what();
    }
    std::unique_lock<std::mutex> lock(s->mu);
    s->written = true;
    s->write_error = err;
    s->cv.notify_all();
    if (rank != 0) return;  // Resolve finishes the other ranks' part
    s->cv.wait(lock, [s] { return s->resolved; });
    if (s->abandoned) return;
    const int32_t failed_rank = s->failed_rank;
    lock.unlock();
    CheckpointEvent ev = failed_rank >= 0 ? FailSave(s->begun, 0, failed_rank, err) : CommitSave(s->begun);
    lock.lock();
    s->event = std::move(ev);
    s->done = true;
  });
  save_ = std::move(save);
  return std::nullopt;
}

void AsyncCheckpointer::Resolve(int32_t failed_rank) {
  Save& s = *save_;
  std::lock_guard<std::mutex> lock(s.mu);
  s.resolved = true;
  s.failed_rank = failed_rank;
  if (rank_ != 0) {
    if (failed_rank >= 0) {
      s.event = FailSave(s.begun, rank_, failed_rank, s.write_error);
    } else {
      s.event = s.begun.event;
      s.event.ok = true;
      s.event.path = CommittedPath(s.begun.commit);
      s.event.unix_millis = NowMillis();
    }
    s.done = true;
  }
  s.cv.notify_all();
}

CheckpointEvent AsyncCheckpointer::Finish() {
  Save& s = *save_;
  if (s.thread.joinable()) s.thread.join();
  CheckpointEvent ev = std::move(s.event);
  ev.trigger = s.trigger;
  ev.request_id = s.request_id;
  ev.blocking_seconds = s.blocking_seconds;
  ev.host_bytes = s.host_bytes;
  if (rank_ != 0) ev.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - s.begun.start).count();
  save_.reset();
  return ev;
}

std::optional<CheckpointEvent> AsyncCheckpointer::Advance(bool all_written, int32_t failed_rank) {
  if (!save_) return std::nullopt;
  bool resolved, done;
  {
    std::lock_guard<std::mutex> lock(save_->mu);
    resolved = save_->resolved;
    done = save_->done;
  }
  if (!resolved && all_written) {
    Resolve(failed_rank);
    std::lock_guard<std::mutex> lock(save_->mu);
    done = save_->done;
    resolved = true;
  }
  if (resolved && done) return Finish();
  return std::nullopt;
}

std::optional<CheckpointEvent> AsyncCheckpointer::Drain(const TrainingState& state) {
  if (!save_) return std::nullopt;
  bool resolved;
  std::string error;
  {
    std::unique_lock<std::mutex> lock(save_->mu);
    save_->cv.wait(lock, [this] { return save_->written || save_->resolved; });
    resolved = save_->resolved;
    error = save_->write_error;
  }
  if (!resolved) Resolve(FirstFailure(state, error.empty()));
  if (save_->thread.joinable()) save_->thread.join();  // rank 0: the commit
  return Finish();
}

}  // namespace trainyard
