// SignedStore: ranks form a real Gloo group through it; a value written by
// anyone without the attempt's secret (a stranger connected to the job's
// store) is refused on reading, naming its key.
#include "worker/signed_store.h"

#include <gtest/gtest.h>
#include <torch/torch.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "common/secrets.h"
#include "worker/process_group.h"

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

}  // namespace
}  // namespace trainyard
