// The run contract as every SupervisedEnvironment provider keeps it: the recipe goes in as a
// copy-on-write view (or a copy), a secret is the run's alone and dies with it.
#include "providers/workspace.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <map>

#include "core/mounts.h"
#include "core/state.h"
#include "providers/supervised_environment.h"
#include "tests/support/provider_fixture.h"

namespace sandgate::testing {
namespace {

std::string contents(const std::string& path, std::string missing = "") {
  auto r = read_file(path);
  return r.ok() ? *r : missing;
}

bool is_mount_point(const std::string& path) {
  auto table = read_mount_table("/proc/self/mountinfo");
  if (!table.ok()) return false;
  for (const auto& m : *table)
    if (m.mount_point == path) return true;
  return false;
}

// A unix socket bound at `path` and listening: what a host daemon leaves in a directory.
UniqueFd listening_socket(const std::string& path) {
  UniqueFd s(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  struct sockaddr_un addr = {};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path.c_str());
  if (::bind(s.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::listen(s.get(), 4) != 0)
    return UniqueFd();
  return s;
}

// Bytes and mtime of every regular file below `dir` (a shallow recipe: two levels).
std::map<std::string, std::pair<std::string, long>> snapshot(
    const std::string& dir, const std::vector<std::string>& files) {
  std::map<std::string, std::pair<std::string, long>> out;
  for (const auto& f : files) {
    struct stat st = {};
    ::stat((dir + "/" + f).c_str(), &st);
    out[f] = {contents(dir + "/" + f, "<missing>"),
              st.st_mtim.tv_sec * 1'000'000'000L + st.st_mtim.tv_nsec};
  }
  return out;
}

class ContractTest : public ProviderTest {
 protected:
  void SetUp() override {
    ProviderTest::SetUp();
    if (!is_root()) return;
    ns_ = provider("namespaces");
    recipe_ = tmp_ + "/recipe";
    ASSERT_TRUE(make_dirs(recipe_ + "/src/deep").ok());
    std::ofstream(recipe_ + "/README") << "readme\n";
    std::ofstream(recipe_ + "/src/main.c") << "int main(){return 0;}\n";
    std::ofstream(recipe_ + "/src/deep/data") << "data\n";
    ASSERT_EQ(::symlink("/etc/hostname", (recipe_ + "/src/link").c_str()), 0);
    // Owned by someone who is neither root nor the sandbox: the host user who checked it out.
    for (const char* p : {"", "/README", "/src", "/src/main.c", "/src/deep", "/src/deep/data"})
      ASSERT_EQ(::lchown((recipe_ + p).c_str(), 1234, 1234), 0);
    ::chmod(tmp_.c_str(), 0711);
  }
  const std::vector<std::string> files_ = {"README", "src/main.c", "src/deep/data"};
  std::unique_ptr<providers::Provider> ns_;
  std::string recipe_;
};

TEST_F(ContractTest, OverlayWritesLandInTheUpperLayerAndNeverInTheRecipe) {
  SANDGATE_REQUIRE_ROOT();
  auto before = snapshot(recipe_, files_);
  providers::EnvSpec spec;
  spec.workspace_recipe = recipe_;
  spec.recipe_mode = providers::RecipeMode::kOverlay;
  auto env = make_env(*ns_, spec);
  ASSERT_TRUE(env);
  EXPECT_EQ(env->workspace_info().kind, "overlay") << env->workspace_info().note;
  std::string run_dir = options_.paths.work_dir + "/" + env->run_id();
  EXPECT_TRUE(is_mount_point(run_dir + "/workspace"));
  // The recipe's owner is the sandbox user inside: it can change and remove what it was given.
  auto r = sh(*env,
              "stat -c '%U %a' /workspace /workspace/src /workspace/src/main.c; readlink "
              "/workspace/src/link;"
              "echo changed >> /workspace/src/main.c && echo new > /workspace/src/deep/new &&"
              " rm /workspace/README && cat /workspace/src/main.c");
  EXPECT_EQ(
      r.stdout_data,
      "sandbox 700\nsandbox 755\nsandbox 644\n/etc/hostname\nint main(){return 0;}\nchanged\n")
      << r.stderr_data;
  // Every write is in the run's upper layer...
  EXPECT_EQ(contents(run_dir + "/upper/src/main.c", ""), "int main(){return 0;}\nchanged\n");
  EXPECT_EQ(contents(run_dir + "/upper/src/deep/new", ""), "new\n");
  struct stat st;
  ASSERT_EQ(::stat((run_dir + "/upper/src/deep/new").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, env->host_id_base() + 10001);
  // ...and none in the recipe: same bytes, same mtimes, nothing added.
  EXPECT_EQ(snapshot(recipe_, files_), before);
  EXPECT_NE(::access((recipe_ + "/src/deep/new").c_str(), F_OK), 0);
  ASSERT_TRUE(env->destroy().ok());
  EXPECT_FALSE(is_mount_point(run_dir + "/workspace"));
  EXPECT_EQ(snapshot(recipe_, files_), before);
}

TEST_F(ContractTest, FifosSocketsAndDevicesOfTheRecipeDoNotReachTheSandbox) {
  SANDGATE_REQUIRE_ROOT();
  ASSERT_EQ(::mkfifo((recipe_ + "/fifo").c_str(), 0666), 0);
  ASSERT_EQ(::mkfifo((recipe_ + "/src/deep/fifo").c_str(), 0666), 0);
  ASSERT_EQ(::mknod((recipe_ + "/src/null").c_str(), S_IFCHR | 0666, makedev(1, 3)), 0);
  UniqueFd sock = listening_socket(recipe_ + "/src/daemon.sock");
  ASSERT_TRUE(sock);
  ::chmod((recipe_ + "/src/daemon.sock").c_str(), 0777);
  struct stat deep_before;
  ASSERT_EQ(::stat((recipe_ + "/src/deep").c_str(), &deep_before), 0);
  for (auto mode : {providers::RecipeMode::kOverlay, providers::RecipeMode::kCopy}) {
    SCOPED_TRACE(providers::to_string(mode));
    providers::EnvSpec spec;
    spec.workspace_recipe = recipe_;
    spec.recipe_mode = mode;
    auto env = make_env(*ns_, spec);
    ASSERT_TRUE(env);
    EXPECT_EQ(env->workspace_info().kind, providers::to_string(mode));
    auto r = sh(*env,
                "cd /workspace; for p in fifo src/deep/fifo src/null src/daemon.sock; do"
                " if [ -e $p ] || [ -L $p ]; then echo reachable $p; fi; done;"
                "ls -A src/deep | tr '\\n' ' '; stat -c '%a %Y' src/deep");
    // Hidden; a view's directories that held them look as they did (mode, mtime; a copy
    // keeps modes only).
    std::string mtime =
        mode == providers::RecipeMode::kOverlay ? std::to_string(deep_before.st_mtim.tv_sec) : "";
    EXPECT_EQ(r.stdout_data.substr(0, mtime.empty() ? 9 : std::string::npos),
              "data 755 " + (mtime.empty() ? "" : mtime + "\n"))
        << r.stderr_data;
  }
  // The socket's host side saw no connection.
  ::fcntl(sock.get(), F_SETFL, O_NONBLOCK);
  EXPECT_LT(::accept(sock.get(), nullptr, nullptr), 0);
}

TEST_F(ContractTest, RecipeWithSeveralOwnersIsCopiedAndSaysWhy) {
  SANDGATE_REQUIRE_ROOT();
  ASSERT_EQ(::chown((recipe_ + "/src/deep").c_str(), 4321, 4321), 0);
  providers::EnvSpec spec;
  spec.workspace_recipe = recipe_;
  auto env = make_env(*ns_, spec);
  ASSERT_TRUE(env);
  EXPECT_EQ(env->workspace_info().kind, "copy");
  EXPECT_NE(env->workspace_info().note.find("more than one owner (src/deep (4321:4321))"),
            std::string::npos)
      << env->workspace_info().note;
  EXPECT_EQ(sh(*env, "stat -c %U /workspace/src/deep; touch /workspace/src/deep/x && echo ok")
                .stdout_data,
            "sandbox\nok\n");
  // Asked for a view, the same recipe is an error that says why, and nothing is left.
  spec.recipe_mode = providers::RecipeMode::kOverlay;
  auto refused = ns_->create(spec);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message().find("more than one owner"), std::string::npos)
      << refused.error().message();
}

TEST_F(ContractTest, SecretIsTheRunsUsersAloneInMemoryAndGoneAtDestroy) {
  SANDGATE_REQUIRE_ROOT();
  providers::EnvSpec spec;
  spec.secrets = {{"TOKEN", "s3cr3t-value\n"}};
  auto env = make_env(*ns_, spec);
  ASSERT_TRUE(env);
  std::string dir = options_.paths.work_dir + "/" + env->run_id() + "/secrets";
  auto r =
      sh(*env,
         "echo $SANDGATE_SECRETS_DIR; stat -c '%U %a' /run/secrets/TOKEN; cat /run/secrets/TOKEN;"
         "echo x > /run/secrets/TOKEN 2>/dev/null || echo read-only; stat -f -c %T /run/secrets");
  EXPECT_EQ(r.stdout_data, "/run/secrets\nsandbox 400\ns3cr3t-value\nread-only\ntmpfs\n")
      << r.stderr_data;
  // Never in the supervisor's environment or command line.
  pid_t sup = dynamic_cast<providers::SupervisedEnvironment&>(*env).supervisor_pid();
  for (const char* f : {"environ", "cmdline"})
    EXPECT_EQ(contents("/proc/" + std::to_string(sup) + "/" + f, "").find("s3cr3t"),
              std::string::npos)
        << f;
  EXPECT_TRUE(is_mount_point(dir));
  struct stat st;
  ASSERT_EQ(::stat((dir + "/TOKEN").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, env->host_id_base() + 10001);
  EXPECT_EQ(st.st_mode & 07777, 0400u);
  // A run without the secret has no /run/secrets at all.
  auto other = make_env(*ns_);
  ASSERT_TRUE(other);
  EXPECT_EQ(sh(*other,
               "ls /run/secrets 2>&1 >/dev/null | grep -c 'No such file'; echo "
               "\"[$SANDGATE_SECRETS_DIR]\"")
                .stdout_data,
            "1\n[]\n");
  ASSERT_TRUE(env->destroy().ok());
  EXPECT_FALSE(is_mount_point(dir));
  EXPECT_NE(::access(dir.c_str(), F_OK), 0);
}

TEST_F(ContractTest, BadSecretNamesAreRefusedNamingTheRule) {
  SANDGATE_REQUIRE_ROOT();
  for (std::string name : {"", "..", "a/b", "x y"}) {
    providers::EnvSpec spec;
    spec.secrets = {{name, "v"}};
    auto env = ns_->create(spec);
    ASSERT_FALSE(env.ok()) << name;
    EXPECT_NE(env.error().message().find("[A-Za-z0-9_.-]"), std::string::npos)
        << env.error().message();
  }
}

// kill -9 of the process that made the run: gc finds the overlay and the secrets tmpfs from
// the record, unmounts them and removes the run.
TEST_F(ContractTest, GcUnmountsTheOverlayAndTheSecretsAfterACrash) {
  SANDGATE_REQUIRE_ROOT();
  auto made = make_pipe();
  ASSERT_TRUE(made.ok());
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    providers::EnvSpec spec;
    spec.workspace_recipe = recipe_;
    spec.recipe_mode = providers::RecipeMode::kOverlay;
    spec.secrets = {{"TOKEN", "v"}};
    auto env = ns_->create(spec);
    std::string id = env.ok() ? (*env)->run_id() : "";
    (void)!::write(made->write.get(), id.data(), id.size());
    made->write.reset();
    ::pause();  // killed here, its run still up
    ::_exit(1);
  }
  made->write.reset();
  auto id = read_all(made->read.get());
  ASSERT_TRUE(id.ok() && !id->empty()) << "the child could not make its run";
  std::string run_dir = options_.paths.work_dir + "/" + *id;
  EXPECT_TRUE(is_mount_point(run_dir + "/workspace"));
  EXPECT_TRUE(is_mount_point(run_dir + "/secrets"));
  ::kill(pid, SIGKILL);
  int status;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  auto report = collect_garbage(options_.paths);
  EXPECT_TRUE(report.errors.empty()) << report.errors.front();
  EXPECT_EQ(report.runs_removed, 1);
  EXPECT_FALSE(is_mount_point(run_dir + "/workspace"));
  EXPECT_FALSE(is_mount_point(run_dir + "/secrets"));
  EXPECT_NE(::access(run_dir.c_str(), F_OK), 0);
}

TEST(RecipeSurvey, FindsWhatMustBeHiddenAndCountsEntries) {
  char tmpl[] = "/tmp/sgsurvey-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  std::string root = tmpl;
  ASSERT_TRUE(make_dirs(root + "/a/b").ok());
  ASSERT_EQ(::mkfifo((root + "/a/b/f").c_str(), 0600), 0);
  std::ofstream(root + "/a/file") << "x";
  ASSERT_EQ(::symlink("/nonexistent", (root + "/a/link").c_str()), 0);
  auto s = providers::survey_recipe(root, 100);
  ASSERT_TRUE(s.ok()) << s.error().message();
  EXPECT_EQ(s->entries, 6u);
  EXPECT_EQ(s->hidden, std::vector<std::string>{"a/b/f"});
  EXPECT_EQ(s->other_owner, "");
  auto limited = providers::survey_recipe(root, 5);
  ASSERT_FALSE(limited.ok());
  EXPECT_NE(limited.error().message().find("max_entries"), std::string::npos);
  (void)remove_tree(root);
}

}  // namespace
}  // namespace sandgate::testing
