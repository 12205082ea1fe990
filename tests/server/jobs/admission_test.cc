// Admission: the whole submit check, in order, and the spec a job runs with.
#include "server/jobs/admission.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <utility>

#include "tests/server/coordinator_parts.h"

namespace trainyard {
namespace {

// A launcher of ranks on other hosts that replaces one rank alone (as
// Slurm's does).
class ElsewhereLauncher final : public Launcher {
 public:
  explicit ElsewhereLauncher(bool replaces_ranks = true) : replaces_ranks_(replaces_ranks) {}
  Traits traits() const override { return {.on_this_host = false, .replaces_ranks = replaces_ranks_}; }
  absl::Status Launch(const LaunchRequest&) override { return absl::OkStatus(); }
  void Stop(const std::string&, int32_t) override {}
  int LiveProcesses(const std::string&) override { return 0; }
  void Adopt(const LaunchRequest&) override {}

 private:
  const bool replaces_ranks_;
};

class AdmissionTest : public ::testing::Test {
 protected:
  AdmissionTest() {
    launchers_.Register(LauncherKind::kLocal, &local_);
    launchers_.Register(LauncherKind::kExternal, &external_);
  }
  Admission Make(int max_queued = 10) {
    JobManagerOptions o;
    o.slots = 4;
    o.state_dir = dir_.path();
    o.max_queued_jobs = max_queued;
    return Admission(AdmissionOptionsOf(o));
  }
  AdmissionState Now(int queued = 0, bool stopping = false) { return {policy_, launchers_, queued, 0, stopping}; }

  TempDir dir_;
  Policy policy_;
  RecordingLauncher local_;
  ExternalLauncher external_{[](const std::string&, int32_t, const WorkerCommand&) {}};
  ElsewhereLauncher elsewhere_;
  ElsewhereLauncher whole_only_{/*replaces_ranks=*/false};
  Launchers launchers_;
};

TEST_F(AdmissionTest, AValidSpecIsAdmittedWithItsPathsResolved) {
  auto a = Make().Admit("max_steps: 10\nnum_processes: 2\n", "", Caller{}, "job-1", Now());
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->spec.launcher, LauncherKind::kLocal);  // the default, made concrete
  EXPECT_EQ(a->spec.checkpoint.project_dir, dir_.path() + "/jobs/job-1");
  EXPECT_EQ(a->priority, 0);
}

// A user of the policy names paths under their own roots only: never in the
// state directory (another job's checkpoints) but in the job's own
// directory, and with no roots, no path at all. Scripts need an account of
// their own unless the policy shares one.
TEST_F(AdmissionTest, AUsersPathsStayUnderTheirRootsAndOutOfTheStateDirectory) {
  const Admission admission = Make();
  TempDir bob_root;
  const Caller bob{"bob", {}, false, {bob_root.path()}};
  const Caller rootless{"carol", {}, false, {}};
  auto admit = [&](const std::string& spec, const Caller& by, const std::string& id = "job-9") {
    return admission.Admit("num_processes: 1\n" + spec, "", by, id, Now()).status();
  };
  const std::string other_job = dir_.path() + "/jobs/job-1/checkpoints";
  std::filesystem::create_directories(other_job);
  absl::Status s = admit("checkpoint: {project_dir: " + other_job + "}\n", bob);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(s.message()).find("outside the allowed roots"), std::string::npos) << s;
  // An admin may (the server's roots hold the state directory by default).
  EXPECT_TRUE(admit("checkpoint: {project_dir: " + other_job + "}\n", Caller{"", {}, true, {}}).ok());
  // A root that holds the state directory does not open it.
  const Caller wide{"dave", {}, false, {std::filesystem::path(dir_.path()).parent_path().string()}};
  s = admit("checkpoint: {project_dir: " + other_job + "}\n", wide);
  EXPECT_NE(std::string(s.message()).find("lies in the server's state directory"), std::string::npos) << s;
  // The job's own directory is allowed: a resume from its checkpoints.
  EXPECT_TRUE(admit("checkpoint: {project_dir: " + dir_.path() + "/jobs/job-9}\n", wide, "job-9").ok());
  EXPECT_TRUE(admit("checkpoint: {project_dir: " + bob_root.path() + "/p}\n", bob).ok());
  s = admit("checkpoint: {project_dir: /tmp}\n", rootless);
  EXPECT_NE(std::string(s.message()).find("has no roots"), std::string::npos) << s;
  EXPECT_TRUE(admit("", rootless).ok()) << "the default project directory needs no root";
  // Scripts: an account of one's own, or a policy that shares the server's.
  const std::string script = bob_root.path() + "/train.py";
  std::ofstream(script) << "print(1)\n";
  s = admit("script: {path: " + script + "}\n", bob);
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
  EXPECT_NE(std::string(s.message()).find("has no unix_user"), std::string::npos) << s;
  Caller with_account = bob;
  with_account.unix_user = "bob";
  EXPECT_TRUE(admit("script: {path: " + script + "}\n", with_account).ok());
  s = admit("script: {path: " + script + "}\nlauncher: external\n", with_account);
  EXPECT_NE(std::string(s.message()).find("only the local launcher"), std::string::npos) << s;
  policy_.shared_account = true;
  EXPECT_TRUE(admit("script: {path: " + script + "}\n", bob).ok());
}

// A policy user's refusal names their roots (not the directory of the job
// being refused, which is never made) and who widens them (an operator, in
// the policy file; not the server's --allowed-root). A resume source may be
// a checkpoint of another job of the same user (a PBT copy resumes its
// source's), never another user's.
TEST_F(AdmissionTest, AUsersRefusalNamesTheirRootsAndTheyMayResumeTheirOwnJobs) {
  JobManagerOptions o;
  o.slots = 4;
  o.state_dir = dir_.path();
  AdmissionOptions options = AdmissionOptionsOf(o);
  options.owner_of = [](const std::string& id) { return id == "job-1" ? std::string("bob") : std::string("carol"); };
  const Admission admission(options);
  TempDir bob_root;
  const Caller bob{"bob", {}, false, {bob_root.path()}};
  auto admit = [&](const std::string& spec) {
    return admission.Admit("num_processes: 1\n" + spec, "", bob, "job-9", Now()).status();
  };
  absl::Status s = admit("checkpoint: {project_dir: /var/tmp/elsewhere}\n");
  EXPECT_NE(std::string(s.message())
                .find("outside the allowed roots (" + bob_root.path() +
                      "); an operator may add a "
                      "directory to the roots of user bob in the server's policy file"),
            std::string::npos)
      << s;
  EXPECT_EQ(std::string(s.message()).find("job-9"), std::string::npos) << s;
  EXPECT_EQ(std::string(s.message()).find("--allowed-root"), std::string::npos) << s;
  const std::string mine = dir_.path() + "/jobs/job-1/checkpoints/checkpoint_1";
  const std::string theirs = dir_.path() + "/jobs/job-2/checkpoints/checkpoint_1";
  std::filesystem::create_directories(mine);
  std::filesystem::create_directories(theirs);
  EXPECT_TRUE(admit("checkpoint: {resume_from: " + mine + "}\n").ok());
  s = admit("checkpoint: {resume_from: " + theirs + "}\n");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  // Only a resume source: no project directory in another job's.
  EXPECT_FALSE(admit("checkpoint: {project_dir: " + mine + "}\n").ok());
}

TEST_F(AdmissionTest, EachRuleRefusesWithItsReason) {
  const Admission admission = Make(/*max_queued=*/1);
  auto refused = [&](const std::string& spec, const AdmissionState& now) {
    return admission.Admit(spec, "", Caller{}, "job-1", now).status();
  };
  EXPECT_EQ(refused("num_processes: [", Now()).code(), absl::StatusCode::kInvalidArgument);  // parse
  absl::Status s = refused("num_processes: 5\n", Now());                                     // resources
  EXPECT_NE(std::string(s.message()).find("4 slots"), std::string::npos) << s;
  EXPECT_EQ(refused("num_processes: 1\nlauncher: slurm\n", Now()).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(refused("num_processes: 1\n", Now(/*queued=*/1)).code(), absl::StatusCode::kResourceExhausted);
  // A stopping server refuses nobody: it is unavailable.
  EXPECT_EQ(refused("num_processes: 1\n", Now(0, /*stopping=*/true)).code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(refused("num_processes: 1\npriority: urgent\n", Now()).code(), absl::StatusCode::kInvalidArgument);
  s = refused("num_processes: 1\ncheckpoint: {project_dir: /elsewhere}\n", Now());
  EXPECT_NE(std::string(s.message()).find("checkpoint.project_dir"), std::string::npos) << s;
}

// A llama model's config.json is read before the server's lock, bounded and
// without blocking: a FIFO or a 100 GB sparse file named as one refuses the
// submission at once, naming the file and why.
TEST_F(AdmissionTest, AConfigThatIsAFifoOrHugeIsRefusedAtOnce) {
  const Admission admission = Make();
  const std::string fifo = dir_.path() + "/fifo", huge = dir_.path() + "/huge";
  std::filesystem::create_directories(fifo);
  std::filesystem::create_directories(huge);
  ASSERT_EQ(::mkfifo((fifo + "/config.json").c_str(), 0600), 0);
  { std::ofstream grow(huge + "/config.json"); }
  std::filesystem::resize_file(huge + "/config.json", uint64_t{100} << 30);
  for (const auto& [dir, why] : {std::pair<std::string, std::string>{fifo, "is a FIFO, not a regular file"},
                                 {huge, "is 107374182400 bytes, more than the 1048576"}}) {
    const std::string spec = "model: {kind: llama, init_from: " + dir + "}\nnum_processes: 1\n";
    const AdmissionFiles files = admission.ReadFiles(spec, "", Caller{});
    ASSERT_TRUE(files.llama_config.has_value()) << dir;
    EXPECT_FALSE(files.llama_config->ok());
    const absl::Status s = admission.Admit(spec, "", Caller{}, "job-1", Now(), &files).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(std::string(s.message()).find("spec field 'model.init_from'"), std::string::npos) << s;
    EXPECT_NE(std::string(s.message()).find(why), std::string::npos) << s;
  }
}

// Replica fault tolerance replaces one rank alone: a launcher that cannot
// is named at submit.
TEST_F(AdmissionTest, ReplicaFaultToleranceNeedsALauncherThatReplacesOneRank) {
  const Admission admission = Make();
  const std::string replica =
      "max_steps: 10\nnum_processes: 2\ndistributed_type: DDP\nfault_tolerance: {mode: replica, min_replicas: 1}\n";
  auto local = admission.Admit(replica, "", Caller{}, "job-1", Now());
  ASSERT_TRUE(local.ok()) << local.status();
  EXPECT_TRUE(local->spec.replicas());
  // Ranks that join are replaced by their next hello.
  EXPECT_TRUE(admission.Admit(replica + "launcher: external\n", "", Caller{}, "job-2", Now()).ok());
  // A launcher that cannot start one rank alone refuses it.
  launchers_.Register(LauncherKind::kSlurm, &whole_only_);
  absl::Status s = admission.Admit(replica + "launcher: slurm\n", "", Caller{}, "job-6", Now()).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(s.message()).find("fault_tolerance.mode"), std::string::npos) << s;
  EXPECT_NE(std::string(s.message()).find("launcher slurm cannot replace one rank alone"), std::string::npos) << s;
  // Ranks elsewhere are replaced too (Slurm), but elastic jobs need a
  // launcher whose slots the scheduler holds.
  launchers_.Register(LauncherKind::kSlurm, &elsewhere_);
  EXPECT_TRUE(admission.Admit(replica + "launcher: slurm\n", "", Caller{}, "job-4", Now()).ok());
  s = admission.Admit(replica + "elastic: {min_processes: 1}\nlauncher: slurm\n", "", Caller{}, "job-5", Now())
          .status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(s.message()).find("elastic jobs run under the local launcher"), std::string::npos) << s;
  // Mode whole_group runs under any launcher.
  EXPECT_TRUE(admission
                  .Admit("max_steps: 10\nnum_processes: 2\nfault_tolerance: {mode: whole_group}\nlauncher: external\n",
                         "", Caller{}, "job-3", Now())
                  .ok());
}

// A script run on this host must be here; ranks that join may see files
// this host does not.
TEST_F(AdmissionTest, AScriptMustExistOnlyWhereItRunsHere) {
  const Admission admission = Make();
  const std::string script = "num_processes: 1\nscript: {path: " + dir_.path() + "/train.py}\n";
  absl::Status s = admission.Admit(script, "", Caller{}, "job-1", Now()).status();
  EXPECT_NE(std::string(s.message()).find("does not exist"), std::string::npos) << s;
  EXPECT_TRUE(admission.Admit(script + "launcher: external\n", "", Caller{}, "job-1", Now()).ok());
}

}  // namespace
}  // namespace trainyard
