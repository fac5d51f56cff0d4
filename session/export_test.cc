// "Commits out, nothing else", against real git on the host: the workspace here is a plain
// directory standing in for a run's (the end-to-end twin through a jail is in
// tests/cli_test.cc), so each hostile trick can be planted exactly.
#include "session/export.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

#include "core/files.h"
#include "core/process.h"

namespace sandgate::session {
namespace {

class ExportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/var/tmp/sgexport-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    tmp_ = tmpl;
    ::chmod(tmp_.c_str(), 0711);  // the recipe's owner (not root) runs git there
    recipe_ = tmp_ + "/recipe";
    work_ = tmp_ + "/workspace";
    marks_ = tmp_ + "/marks";
    ASSERT_TRUE(make_dirs(marks_).ok());
    ASSERT_TRUE(make_dirs(recipe_).ok());
    sh("cd " + recipe_ + " && git init -q -b main && echo one > f && git add f && " + kCommit +
       " -m one");
    // The workspace: the recipe as a run got it, with one commit made inside.
    sh("cp -a " + recipe_ + " " + work_ + " && cd " + work_ + " && echo two >> f && " + kCommit +
       " -am two");
  }
  void TearDown() override { (void)remove_tree(tmp_); }

  static constexpr const char* kCommit =
      "git -c user.name=agent -c user.email=agent@example.com commit -q";

  std::string sh(const std::string& script) {
    auto r = run_command({"/bin/sh", "-c", script});
    EXPECT_TRUE(r.ok() && r->status.exited && r->status.code == 0) << script << "\n"
                                                                   << (r.ok() ? r->output : "");
    return r.ok() ? r->output : "";
  }
  std::string rev(const std::string& repo, const std::string& ref) {
    auto r = run_command(
        {"git", "-c", "safe.directory=*", "-C", repo, "rev-parse", "--verify", "--quiet", ref});
    std::string out = r.ok() ? r->output : "";
    while (!out.empty() && out.back() == '\n') out.pop_back();
    return out;
  }
  size_t marks() {
    size_t n = 0;
    auto r = run_command({"/bin/sh", "-c", "ls -A " + marks_ + " | wc -l"});
    if (r.ok()) n = std::stoul(r->output);
    return n;
  }

  std::string tmp_, recipe_, work_, marks_;
};

TEST_F(ExportTest, TheWorkspacesCommitArrivesAsTheBranch) {
  // The recipe is the host user's: what the export writes there must be theirs too.
  sh("chown -R 1234:1234 " + recipe_);
  Status s = export_branch(work_, recipe_, "agent/fix-1", false);
  ASSERT_TRUE(s.ok()) << s.error().message();
  EXPECT_EQ(sh("find " + recipe_ + " ! -uid 1234 | wc -l"), "0\n")
      << sh("find " + recipe_ + " ! -uid 1234");
  EXPECT_EQ(rev(recipe_, "refs/heads/agent/fix-1"), rev(work_, "HEAD"));
  EXPECT_EQ(sh("git -c safe.directory='*' -C " + recipe_ + " log -1 --format=%s agent/fix-1"),
            "two\n");
  // The recipe's own branch and working tree are untouched.
  EXPECT_EQ(sh("git -c safe.directory='*' -C " + recipe_ + " log -1 --format=%s main; cat " +
               recipe_ + "/f"),
            "one\none\n");
  // An existing branch is refused, unless asked.
  Status again = export_branch(work_, recipe_, "agent/fix-1", false);
  ASSERT_FALSE(again.ok());
  EXPECT_NE(again.error().message().find("already exists"), std::string::npos)
      << again.error().message();
  EXPECT_TRUE(export_branch(work_, recipe_, "agent/fix-1", true).ok());
}

TEST_F(ExportTest, BadBranchNamesAreRefused) {
  for (std::string name : {"", "-x", "a..b", "a b", "x.lock", "HEAD~1", "@{-1}"}) {
    Status s = export_branch(work_, recipe_, name, false);
    EXPECT_FALSE(s.ok()) << "'" << name << "' was accepted";
  }
  EXPECT_TRUE(check_export_branch("agent/fix-1").ok());
}

// The workspace's config, hooks and fsmonitor are never read or run on the host.
TEST_F(ExportTest, AHostileWorkspaceExecutesNothingOnTheHost) {
  std::string g = work_ + "/.git";
  sh("git -C " + work_ + " config core.fsmonitor 'touch " + marks_ + "/fsmonitor'");
  sh("git -C " + work_ + " config core.hooksPath " + g + "/hooks");
  sh("git -C " + work_ + " config uploadpack.packObjectsHook 'touch " + marks_ +
     "/packobjectshook'");
  for (const char* hook :
       {"post-checkout", "reference-transaction", "pre-auto-gc", "post-merge", "post-update"}) {
    std::string path = g + "/hooks/" + hook;
    std::ofstream(path) << "#!/bin/sh\ntouch " << marks_ << "/" << hook << "\n";
    ::chmod(path.c_str(), 0755);
  }
  // Positive control: the planted traps do fire when git runs in that workspace.
  sh("git -C " + work_ + " status --short >/dev/null; git -C " + work_ + " checkout -q -b probe");
  ASSERT_GE(marks(), 2u) << "the traps did not fire natively: they would prove nothing";
  sh("rm -f " + marks_ + "/*; git -C " + work_ + " checkout -q main 2>/dev/null; rm -f " + marks_ +
     "/*");
  Status s = export_branch(work_, recipe_, "agent", false);
  EXPECT_TRUE(s.ok()) << s.error().message();
  EXPECT_EQ(marks(), 0u) << sh("ls " + marks_);
  EXPECT_EQ(rev(recipe_, "refs/heads/agent"), rev(work_, "HEAD"));
}

// objects/info/alternates pointing at another repository: its objects do not come along, and
// a commit that needs them cannot be exported.
TEST_F(ExportTest, AlternatesAreNotFollowed) {
  std::string other = tmp_ + "/other";
  sh("git init -q -b main " + other + " && cd " + other + " && echo secret > s && git add s && " +
     kCommit + " -m secret");
  // A fresh workspace whose history lives only in `other`: it borrows every object from there.
  std::string borrowing = tmp_ + "/borrowing";
  sh("git clone -q --shared " + other + " " + borrowing + " && cd " + borrowing +
     " && echo x >> s && " + kCommit + " -am mine");
  ASSERT_EQ(::access((borrowing + "/.git/objects/info/alternates").c_str(), F_OK), 0);
  Status s = export_branch(borrowing, recipe_, "borrowed", false);
  ASSERT_FALSE(s.ok()) << "a commit whose parents live in another repository was exported";
  EXPECT_NE(s.error().message().find("fetch"), std::string::npos) << s.error().message();
  EXPECT_EQ(rev(recipe_, "refs/heads/borrowed"), "");
  EXPECT_EQ(sh("git -C " + recipe_ + " cat-file -t " + rev(other, "HEAD") +
               " 2>/dev/null || echo absent"),
            "absent\n");
}

TEST_F(ExportTest, ACorruptObjectFailsTheExport) {
  // Replace the loose blob of the new file content by garbage with the same name.
  std::string blob = sh("git -C " + work_ + " rev-parse HEAD:f");
  blob.pop_back();
  std::string path = work_ + "/.git/objects/" + blob.substr(0, 2) + "/" + blob.substr(2);
  ::chmod(path.c_str(), 0644);
  std::ofstream(path, std::ios::trunc) << "not zlib at all";
  Status s = export_branch(work_, recipe_, "corrupt", false);
  ASSERT_FALSE(s.ok()) << "a corrupt object was exported";
  EXPECT_EQ(rev(recipe_, "refs/heads/corrupt"), "");
}

TEST_F(ExportTest, AGitfileOrAnUncommittedWorkspaceIsAClearError) {
  std::string linked = tmp_ + "/linked";
  sh("mkdir " + linked + " && echo 'gitdir: " + recipe_ + "/.git' > " + linked + "/.git");
  Status s = export_branch(linked, recipe_, "x", false);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message().find(".git directory"), std::string::npos) << s.error().message();
  std::string empty = tmp_ + "/empty";
  sh("git init -q " + empty);
  Status none = export_branch(empty, recipe_, "x", false);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.error().message().find("has no commit"), std::string::npos)
      << none.error().message();
}

TEST_F(ExportTest, ExportDirectoryCopiesIntoAnAbsentOrEmptyDirectoryOnly) {
  ASSERT_EQ(::symlink("/etc/passwd", (work_ + "/link").c_str()), 0);
  ASSERT_EQ(::mkfifo((work_ + "/fifo").c_str(), 0600), 0);
  std::string out = tmp_ + "/out";
  ASSERT_TRUE(make_dirs(out).ok());
  Status s = export_directory(work_, out);
  ASSERT_TRUE(s.ok()) << s.error().message();
  EXPECT_EQ(
      sh("cat " + out + "/f; readlink " + out + "/link; test -e " + out + "/fifo || echo no-fifo"),
      "one\ntwo\n/etc/passwd\nno-fifo\n");
  Status full = export_directory(work_, out);
  ASSERT_FALSE(full.ok());
  EXPECT_NE(full.error().message().find("does not exist or is empty"), std::string::npos)
      << full.error().message();
}

}  // namespace
}  // namespace sandgate::session
