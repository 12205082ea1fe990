// SignedStore: ranks form a real Gloo group through it; a value written by
// anyone without the attempt's secret (a stranger connected to the job's
// store) is refused on reading, naming its key.
#include "worker/collectives/signed_store.h"

#include <gtest/gtest.h>
#include <torch/torch.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/placement.h"
#include "common/secrets.h"
#include "worker/collectives/process_group.h"
#include "worker/control/membership.h"
#include "worker/replicas/replica_group.h"

namespace trainyard {
namespace {

std::vector<uint8_t> Bytes(const std::string& s) { return std::vector<uint8_t>(s.begin(), s.end()); }

TEST(SignedStoreTest, RanksFormAGroupThroughIt) {
  auto inner = c10::make_intrusive<c10d::HashStore>();
  const std::string secret = RendezvousSecret("token-0123456789abcdef", "job-1", 1);
  std::vector<double> sums(2);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      auto store = c10::make_intrusive<SignedStore>(inner, secret);
      auto pg = MakeProcessGroup(Backend::kGloo, store, r, 2, "127.0.0.1", std::chrono::seconds(30));
      std::vector<at::Tensor> t = {at::full({1}, r + 1.0, at::kDouble)};
      pg->allreduce(t)->wait();
      sums[r] = t[0].item<double>();
    });
  }
  for (auto& t : ranks) t.join();
  EXPECT_EQ(sums, (std::vector<double>{3, 3}));
}

TEST(SignedStoreTest, ValuesWithoutTheSecretAreRefused) {
  auto inner = c10::make_intrusive<c10d::HashStore>();
  const std::string secret = RendezvousSecret("token-0123456789abcdef", "job-1", 1);
  SignedStore store(inner, secret);
  store.set("ok", Bytes("10.0.0.7:29500"));
  EXPECT_EQ(store.get("ok"), Bytes("10.0.0.7:29500"));
  // Written straight to the store, as a stranger connected to it would.
  inner->set("addr", Bytes("10.0.0.66:1234"));
  try {
    store.get("addr");
    FAIL() << "a forged value was read";
  } catch (const ForgedStoreValue& e) {
    EXPECT_NE(std::string(e.what()).find("'addr' was not written by a rank of this attempt"), std::string::npos)
        << e.what();
  }
  // Signed under another attempt's secret, or changed after it was signed.
  SignedStore(inner, RendezvousSecret("token-0123456789abcdef", "job-1", 2)).set("other", Bytes("x"));
  EXPECT_THROW(store.get("other"), ForgedStoreValue);
  std::vector<uint8_t> raw = inner->get("ok");
  raw[0] ^= 1;
  inner->set("ok", raw);
  EXPECT_THROW(store.get("ok"), ForgedStoreValue);
  // A signed value moved to another key does not pass either.
  store.set("a", Bytes("v"));
  inner->set("b", inner->get("a"));
  EXPECT_THROW(store.get("b"), ForgedStoreValue);
  // compareSet as the store does it: first writer wins, the value signed.
  EXPECT_EQ(store.compareSet("c", {}, Bytes("first")), Bytes("first"));
  EXPECT_EQ(store.compareSet("c", Bytes("first"), Bytes("second")), Bytes("second"));
  EXPECT_EQ(store.get("c"), Bytes("second"));
}

// Whether a TCP connection to ip:port is accepted.
bool Reachable(const char* ip, int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, ip, &a.sin_addr);
  const bool ok = connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  close(fd);
  return ok;
}

// The stores a rank serves listen on the address the others reach them by,
// not on every address of the host: 127.0.0.2 is this host too, but not
// the address the store was given.
TEST(SignedStoreTest, StoresListenOnlyWhereTheyAreReached) {
  ReplicaStore replica("127.0.0.1");
  EXPECT_TRUE(Reachable("127.0.0.1", replica.port()));
  EXPECT_FALSE(Reachable("127.0.0.2", replica.port())) << "the replica store listens on every address";
  RendezvousOptions o;
  o.master_addr = "127.0.0.1";
  o.master_port = PickFreePortOn("127.0.0.1");
  o.world_size = 1;
  auto store = ConnectStore(o);
  EXPECT_TRUE(Reachable("127.0.0.1", o.master_port));
  EXPECT_FALSE(Reachable("127.0.0.2", o.master_port)) << "the rendezvous store listens on every address";
}

// A replica epoch's groups form through a signed store: a member whose
// values do not carry the attempt's secret (as a stranger's would not) is
// refused, where it would otherwise be taken as a peer.
TEST(SignedStoreTest, ReplicaEpochsFormOnlyWithTheAttemptsSecret) {
  ReplicaStore store("127.0.0.1");
  const MembershipView m{1, {0, 1}, "127.0.0.1", store.port(), "start"};
  const std::string secret = RendezvousSecret("token-0123456789abcdef", "job-1", 1);
  {
    std::vector<std::unique_ptr<ReplicaGroup>> groups(2);
    std::vector<std::thread> ranks;
    for (int r = 0; r < 2; ++r) {
      ranks.emplace_back([&, r] {
        groups[r] = std::make_unique<ReplicaGroup>(m, r, "127.0.0.1", std::chrono::seconds(30), false, nullptr, nullptr,
                                                   0, secret);
      });
    }
    for (auto& t : ranks) t.join();
    EXPECT_TRUE(groups[0] && groups[1]);
  }
  const MembershipView m2{2, {0, 1}, "127.0.0.1", store.port(), "again"};
  std::vector<std::string> errors(2);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      try {
        ReplicaGroup g(m2, r, "127.0.0.1", std::chrono::seconds(5), false, nullptr, nullptr, 0,
                       r == 0 ? secret : RendezvousSecret("a-stranger's-token-0000", "job-1", 1));
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& t : ranks) t.join();
  const bool refused = errors[0].find("was not written by a rank of this attempt") != std::string::npos ||
                       errors[1].find("was not written by a rank of this attempt") != std::string::npos;
  EXPECT_TRUE(refused) << "rank 0: " << errors[0] << "\nrank 1: " << errors[1];
}

}  // namespace
}  // namespace trainyard
