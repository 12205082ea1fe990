// Not built: tests/server/thread_safety_check.py compiles it to show that
// clang's thread-safety analysis rejects an access without the lock.
#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

class Counter {
 public:
  void Increment() { ++value_; }  // no lock held: the analysis must refuse this

 private:
  absl::Mutex mu_;
  int value_ ABSL_GUARDED_BY(mu_) = 0;
};

int main() {
  Counter c;
  c.Increment();
}
