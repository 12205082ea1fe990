// Linked into the programs that run ranks as threads: SIGPIPE is ignored, as
// trainyard-worker ignores it (worker/worker_main.cc), so a peer that closed
// its socket is an error on the write (EPIPE) and not the end of the test
// program.
#include <csignal>

namespace {

const bool kSigpipeIgnored = [] {
  std::signal(SIGPIPE, SIG_IGN);
  return true;
}();

}  // namespace
