// JobHistory's downsampling, checked against the raw series it was fed.
#include "server/jobs/job_history.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

namespace trainyard {
namespace {

// A noisy falling loss with spikes: what a real curve looks like.
std::vector<HistoryPoint> Curve(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> noise(0, 0.05);
  std::vector<HistoryPoint> out;
  for (int i = 0; i < n; ++i) {
    double v = 3.0 * std::exp(-i / 2000.0) + 0.5 + noise(rng);
    if (i % 977 == 500) v += 2.0;  // a spike
    out.push_back({i + 1, 1'700'000'000'000 + i * 10, v});
  }
  return out;
}

TEST(SeriesHistory, TenThousandStepsKeepTheBoundFirstLastAndExtremes) {
  const auto raw = Curve(10000, 1);
  SeriesHistory s;
  for (const auto& p : raw) s.Add(p);
  const auto pts = s.points();
  EXPECT_EQ(s.added(), 10000);
  EXPECT_LE(pts.size(), 2000u);
  EXPECT_GE(pts.size(), 1000u);  // bounded, not starved
  EXPECT_EQ(pts.front(), raw.front());
  EXPECT_EQ(pts.back(), raw.back());
  auto by_value = [](const HistoryPoint& a, const HistoryPoint& b) { return a.value < b.value; };
  EXPECT_EQ(*std::min_element(pts.begin(), pts.end(), by_value), *std::min_element(raw.begin(), raw.end(), by_value));
  EXPECT_EQ(*std::max_element(pts.begin(), pts.end(), by_value), *std::max_element(raw.begin(), raw.end(), by_value));
  // Every kept point is a sample as it came, in the order it came.
  size_t j = 0;
  for (const auto& p : pts) {
    while (j < raw.size() && !(raw[j] == p)) ++j;
    ASSERT_LT(j, raw.size()) << "point at step " << p.step << " is not a sample, or out of order";
  }
  // Every spike survives (each is its bucket's maximum).
  for (int i = 500; i < 10000; i += 977) {
    EXPECT_TRUE(std::any_of(pts.begin(), pts.end(), [&](const HistoryPoint& p) { return p.step == i + 1; }))
        << "spike at step " << i + 1;
  }
}

TEST(SeriesHistory, ShortSeriesAreKeptWhole) {
  const auto raw = Curve(1500, 2);
  SeriesHistory s;
  for (const auto& p : raw) s.Add(p);
  EXPECT_EQ(s.points(), raw);
  SeriesHistory one;
  one.Add(raw[0]);
  EXPECT_EQ(one.points(), std::vector<HistoryPoint>{raw[0]});
  EXPECT_TRUE(SeriesHistory().points().empty());
}

TEST(SeriesHistory, StaysBoundedForAMillionSamplesAtEverySize) {
  SeriesHistory s(100);
  const auto raw = Curve(20000, 3);
  for (int k = 0; k < 50; ++k) {
    for (const auto& p : raw) {
      s.Add(p);
      ASSERT_LE(s.points().size(), 100u);
      if (k > 0) break;  // checking every size once is enough for the small bound; then feed fast
    }
    if (k > 0) {
      for (const auto& p : raw) s.Add(p);
    }
  }
  EXPECT_LE(s.points().size(), 100u);
  EXPECT_EQ(s.points().back(), raw.back());
}

TEST(SeriesHistory, StepsThatRepeatAfterARestartAreKeptInArrivalOrder) {
  SeriesHistory s;
  for (int i = 1; i <= 100; ++i) s.Add({i, i * 10, 1.0 / i});
  for (int i = 60; i <= 120; ++i) s.Add({i, 2000 + i * 10, 1.0 / i});  // restarted from step 60
  const auto pts = s.points();
  ASSERT_EQ(pts.size(), 161u);
  EXPECT_EQ(pts[100].step, 60);
  EXPECT_EQ(pts.back().step, 120);
}

TEST(JobHistory, EncodeDecodeKeepsEverySeriesAndGoesOnTheSameWay) {
  JobHistory a;
  StepMetrics m;
  const auto raw = Curve(7000, 4);
  for (size_t i = 0; i < raw.size(); ++i) {
    m.step = raw[i].step;
    m.unix_millis = raw[i].unix_millis;
    m.loss = raw[i].value;
    m.samples_per_second = 1000 + static_cast<double>(i % 7);
    m.step_seconds = 0.01;
    m.learning_rate = 1e-3;
    m.eval_loss = i % 100 == 0 ? raw[i].value : std::nan("");
    m.model_flops = 1e9;
    m.peak_flops = 1e12;
    a.Add(m, 2);
    if (i == 4000) {
      // Decode mid-run, and feed both the rest: same points.
      auto b = JobHistory::Decode(a.Encode());
      ASSERT_TRUE(b.ok()) << b.status();
      for (size_t k = i + 1; k < raw.size(); ++k) {
        m.step = raw[k].step;
        m.unix_millis = raw[k].unix_millis;
        m.loss = raw[k].value;
        m.samples_per_second = 1000 + static_cast<double>(k % 7);
        m.eval_loss = k % 100 == 0 ? raw[k].value : std::nan("");
        a.Add(m, 2);
        b->Add(m, 2);
      }
      ASSERT_EQ(a.series().size(), b->series().size());
      for (const auto& [name, s] : a.series()) {
        ASSERT_TRUE(b->series().count(name)) << name;
        EXPECT_EQ(s.points(), b->series().at(name).points()) << name;
        EXPECT_EQ(s.added(), b->series().at(name).added()) << name;
      }
      break;
    }
  }
  EXPECT_EQ(a.series().at("eval_loss").added(), 70);  // only the evaluations
  EXPECT_DOUBLE_EQ(a.series().at("mfu").points().back().value, 0.1);
  EXPECT_DOUBLE_EQ(a.series().at("world_size").points().back().value, 2);
  EXPECT_EQ(a.series().count("grad_norm"), 0u);  // never reported
  // The store's form is small: well under 1 KB per sample.
  EXPECT_LT(a.Encode().size(), 7000u * 9 * 40);
}

TEST(JobHistory, AScriptsNamedNumbersAreSeriesOfTheirOwnBoundedInNumber) {
  JobHistory a;
  StepMetrics m;
  for (int step = 1; step <= 50; ++step) {
    m.step = step;
    m.unix_millis = 1'700'000'000'000 + step;
    m.loss = 1.0 / step;
    m.values = {{"accuracy", step / 50.0}, {"loss", 99}, {"train/ppl", std::nan("")}};
    for (int k = 0; k < 30; ++k) m.values["extra" + std::to_string(k)] = k;
    m.values[std::string(JobHistory::kMaxValueNameBytes + 1, 'x')] = 1;
    a.Add(m, 1);
  }
  ASSERT_TRUE(a.series().count("accuracy"));
  EXPECT_EQ(a.series().at("accuracy").added(), 50);
  EXPECT_DOUBLE_EQ(a.series().at("accuracy").points().back().value, 1.0);
  // A name of the built-in list stays the built-in series.
  EXPECT_DOUBLE_EQ(a.series().at("loss").points().back().value, 1.0 / 50);
  EXPECT_EQ(a.series().count("train/ppl"), 0u);  // never a finite number
  EXPECT_EQ(a.series().count(std::string(JobHistory::kMaxValueNameBytes + 1, 'x')), 0u);
  // At most kMaxValueSeries names of a script's own, the same ones after a restart.
  size_t own = 0;
  for (const auto& [name, s] : a.series()) {
    const auto& builtin = JobHistory::SeriesNames();
    own += std::find(builtin.begin(), builtin.end(), name) == builtin.end() ? 1 : 0;
  }
  EXPECT_EQ(own, JobHistory::kMaxValueSeries);
  auto b = JobHistory::Decode(a.Encode());
  ASSERT_TRUE(b.ok()) << b.status();
  m.step = 51;
  m.values["late"] = 1;
  b->Add(m, 1);
  EXPECT_EQ(b->series().count("late"), 0u);
  EXPECT_EQ(b->series().at("accuracy").added(), 51);
}

TEST(JobHistory, DecodeRefusesWhatIsNotAHistory) {
  EXPECT_FALSE(JobHistory::Decode("").ok());
  EXPECT_FALSE(JobHistory::Decode("TYH2xxxx").ok());
  JobHistory h;
  StepMetrics m;
  for (int i = 0; i < 50; ++i) h.Add(m, 1);
  const std::string good = h.Encode();
  for (size_t cut = 4; cut < good.size(); cut += 7) {
    EXPECT_FALSE(JobHistory::Decode(good.substr(0, cut)).ok()) << "cut at " << cut;
  }
  EXPECT_FALSE(JobHistory::Decode(good + "x").ok());
  EXPECT_TRUE(JobHistory::Decode(good).ok());
}

TEST(JobHistory, ASaveAndTheTailsAfterItAreTheLiveHistory) {
  JobHistory live;
  StepMetrics m;
  const auto raw = Curve(4600, 9);  // whole saves at 999 .. 3999, tails at every 37th after
  std::string saved;
  std::vector<std::string> tails;
  for (size_t i = 0; i < raw.size(); ++i) {
    m.step = raw[i].step;
    m.unix_millis = raw[i].unix_millis;
    m.loss = raw[i].value;
    m.samples_per_second = 100;
    m.eval_loss = i % 50 == 0 ? raw[i].value : std::nan("");
    live.Add(m, 4);
    if (i % 1000 == 999) {  // a whole save: the tails so far are in it
      saved = live.Encode();
      live.MarkPersisted();
      tails.clear();
    } else if (i % 37 == 0) {
      tails.push_back(live.TakeTail());
    }
  }
  EXPECT_EQ(live.TakeTail().empty(), false) << "points since the last take";
  EXPECT_EQ(live.TakeTail(), "") << "taken once";
  // The points of the last tail taken above are not in `tails`: replayed
  // without them, the history ends where the last stored tail did.
  auto back = JobHistory::Decode(saved);
  ASSERT_TRUE(back.ok()) << back.status();
  for (const std::string& t : tails) ASSERT_TRUE(back->AddTail(t).ok());
  JobHistory upto;  // the live history fed up to the last stored tail
  const size_t last = (raw.size() - 1) / 37 * 37;
  for (size_t i = 0; i <= last; ++i) {
    m.step = raw[i].step;
    m.unix_millis = raw[i].unix_millis;
    m.loss = raw[i].value;
    m.eval_loss = i % 50 == 0 ? raw[i].value : std::nan("");
    upto.Add(m, 4);
  }
  ASSERT_EQ(back->series().size(), upto.series().size());
  for (const auto& [name, s] : upto.series()) {
    EXPECT_EQ(back->series().at(name).points(), s.points()) << name;
    EXPECT_EQ(back->series().at(name).added(), s.added()) << name;
  }
  EXPECT_TRUE(back->dirty()) << "the next whole save includes the tails";
  EXPECT_FALSE(back->AddTail("TYH1").ok());
  const std::string one = [&] {
    JobHistory h;
    h.Add(m, 1);
    return h.TakeTail();
  }();
  for (size_t cut = 4; cut < one.size(); cut += 3) EXPECT_FALSE(back->AddTail(one.substr(0, cut)).ok()) << cut;
  EXPECT_FALSE(back->AddTail(one + "x").ok());
}

}  // namespace
}  // namespace trainyard
