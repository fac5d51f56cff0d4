#include "core/result.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <string>

#include "core/defer.h"

namespace sandgate {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(ErrnoName, KnownAndUnknownValues) {
  EXPECT_EQ(errno_name(EPERM), "EPERM");
  EXPECT_EQ(errno_name(ENOENT), "ENOENT");
  EXPECT_EQ(errno_name(0), "");
  EXPECT_EQ(errno_name(99999), "E99999");
  EXPECT_EQ(sys_error(EACCES, "open").errno_name(), "EACCES");
}

TEST(ErrorMessage, SystemErrorNamesStepPathStrerrorAndErrno) {
  Error e = sys_error(ENOENT, "open", "/etc/nothing");
  EXPECT_EQ(e.message(), "open /etc/nothing: " + std::string(strerror(ENOENT)) + " (ENOENT)");
}

TEST(ErrorMessage, WithoutPath) {
  EXPECT_EQ(sys_error(EPERM, "unshare").message(),
            "unshare: " + std::string(strerror(EPERM)) + " (EPERM)");
}

TEST(ErrorMessage, LogicErrorCarriesDetailAndNoErrno) {
  Error e = logic_error("parse policy", "unknown key 'x'", "/p.json");
  EXPECT_EQ(e.err, 0);
  EXPECT_EQ(e.errno_name(), "");
  EXPECT_EQ(e.message(), "parse policy /p.json: unknown key 'x'");
}

TEST(ErrorMessage, ContextChainInOrderOutermostLast) {
  Error e = sys_error(EBUSY, "rmdir", "/a")
                .context_add("removing workspace")
                .context_add("destroying run r1");
  EXPECT_THAT(e.context, ElementsAre("removing workspace", "destroying run r1"));
  EXPECT_EQ(e.message(), "rmdir /a: " + std::string(strerror(EBUSY)) +
                             " (EBUSY) <- removing workspace <- destroying run r1");
}

TEST(ErrorMessage, ErrnoAndDetailTogether) {
  Error e = sys_error(EINVAL, "write", "/sys/fs/cgroup/x/memory.max");
  e.detail = "value 'abc'";
  EXPECT_EQ(e.message(), "write /sys/fs/cgroup/x/memory.max: " + std::string(strerror(EINVAL)) +
                             " (EINVAL): value 'abc'");
}

TEST(SysError, ReadsErrnoAtTheCall) {
  errno = EEXIST;
  Error e = sys_error("mkdir", "/x");
  EXPECT_EQ(e.err, EEXIST);
  EXPECT_EQ(e.step, "mkdir");
  EXPECT_EQ(e.path, "/x");
}

Result<int> half(int n) {
  if (n % 2 != 0) return logic_error("half", std::to_string(n) + " is odd");
  return n / 2;
}

Result<int> quarter(int n) {
  SG_ASSIGN_OR_RETURN(int h, half(n));
  SG_ASSIGN_OR_RETURN(int q, half(h));
  return q;
}

Status check_even(int n) {
  SG_TRY(half(n));
  return {};
}

Status check_all(int a, int b) {
  SG_TRY(check_even(a));
  SG_TRY(std::move(check_even(b)).context("second value"));
  return ok_status();
}

TEST(Result, ValueAndError) {
  Result<int> good = 5;
  ASSERT_TRUE(good.ok());
  EXPECT_TRUE(static_cast<bool>(good));
  EXPECT_EQ(*good, 5);
  Result<int> bad = logic_error("x", "y");
  EXPECT_FALSE(bad.ok());
  EXPECT_FALSE(static_cast<bool>(bad));
  EXPECT_EQ(bad.error().step, "x");
}

TEST(Result, MoveOnlyValue) {
  Result<std::unique_ptr<int>> r = std::make_unique<int>(7);
  ASSERT_TRUE(r.ok());
  std::unique_ptr<int> p = std::move(r).value();
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(*p, 7);
}

TEST(Result, AssignOrReturnPropagatesValue) {
  auto r = quarter(12);
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_EQ(*r, 3);
}

TEST(Result, AssignOrReturnPropagatesTheFirstError) {
  auto r = quarter(6);  // 6 -> 3 -> odd
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().detail, "3 is odd");
  auto r2 = quarter(5);
  ASSERT_FALSE(r2.ok());
  EXPECT_EQ(r2.error().detail, "5 is odd");
}

TEST(Result, TryPropagatesErrorsAndContext) {
  EXPECT_TRUE(check_all(2, 4).ok());
  Status s = check_all(3, 4);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().detail, "3 is odd");
  EXPECT_TRUE(s.error().context.empty());
  Status s2 = check_all(2, 5);
  ASSERT_FALSE(s2.ok());
  EXPECT_EQ(s2.error().detail, "5 is odd");
  EXPECT_THAT(s2.error().context, ElementsAre("second value"));
}

TEST(Result, ContextOnlyOnError) {
  Result<int> good = std::move(Result<int>(1)).context("ignored");
  ASSERT_TRUE(good.ok());
  EXPECT_EQ(*good, 1);

  Status ok = std::move(ok_status()).context("ignored");
  EXPECT_TRUE(ok.ok());

  Result<int> bad = std::move(half(1)).context("inner").context("outer");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.error().context, ElementsAre("inner", "outer"));
  EXPECT_THAT(bad.error().message(), HasSubstr("1 is odd <- inner <- outer"));
}

TEST(Defer, RunsAtScopeExitUnlessCancelled) {
  int runs = 0;
  {
    Defer d([&] { ++runs; });
    EXPECT_EQ(runs, 0);
  }
  EXPECT_EQ(runs, 1);
  {
    Defer d([&] { ++runs; });
    d.cancel();
  }
  EXPECT_EQ(runs, 1);
}

}  // namespace
}  // namespace sandgate
