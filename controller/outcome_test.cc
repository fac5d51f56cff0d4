// Outcome classification: every way a call can end, with the retry advice an agent acts on,
// and the JSON every outcome carries.
#include "controller/outcome.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <string>

namespace sandgate::controller {
namespace {

// classify() reads how the call ended from its ExecResult: set the caller's two flags there.
void classify_as(CallOutcome& o, bool timed_out, bool cancelled_by_caller) {
  o.exec.timed_out = timed_out;
  o.exec.cancelled = cancelled_by_caller;
  classify(o);
}

using ::testing::HasSubstr;
using ::testing::Not;

using namespace std::chrono_literals;

ExitStatus exited(int code) { return ExitStatus{true, code, 0}; }
ExitStatus signalled(int sig) { return ExitStatus{false, 0, sig}; }

CallOutcome outcome(ExitStatus exit) {
  CallOutcome o;
  o.call_id = "call-1";
  o.argv = {"make", "-j4"};
  o.intent = {"compile", true, "rule /^make/"};
  o.grant.memory_max = MiB(512);
  o.grant.cpu_cores = 2.0;
  o.grant.pids_max = 64;
  o.grant.timeout = std::chrono::seconds(10);
  o.exec.status = exit;
  o.exec.wall = 1500ms;
  return o;
}

// Every outcome says why it ended and what to do, on one line.
void ExpectOneLineReasonAndAdvice(const CallOutcome& o) {
  EXPECT_FALSE(o.reason.empty());
  EXPECT_FALSE(o.advice.empty());
  EXPECT_EQ(o.reason.find('\n'), std::string::npos) << o.reason;
  EXPECT_EQ(o.advice.find('\n'), std::string::npos) << o.advice;
}

TEST(OutcomeNames, EveryTerminationAndAdviceHasItsName) {
  EXPECT_EQ(to_string(Termination::kExited), "exited");
  EXPECT_EQ(to_string(Termination::kTimeout), "timeout");
  EXPECT_EQ(to_string(Termination::kMemoryLimit), "memory_limit");
  EXPECT_EQ(to_string(Termination::kPidsLimit), "pids_limit");
  EXPECT_EQ(to_string(Termination::kCancelled), "cancelled");
  EXPECT_EQ(to_string(Termination::kKilled), "killed");
  EXPECT_EQ(to_string(RetryAdvice::kRetry), "retry");
  EXPECT_EQ(to_string(RetryAdvice::kRetryWithSmallerScope), "retry_with_smaller_scope");
  EXPECT_EQ(to_string(RetryAdvice::kNoRetry), "no_retry");
}

TEST(Classify, ExitedZero) {
  CallOutcome o = outcome(exited(0));
  classify_as(o, false, false);
  EXPECT_EQ(o.termination, Termination::kExited);
  EXPECT_EQ(o.retry, RetryAdvice::kNoRetry);
  EXPECT_THAT(o.reason, HasSubstr("status 0"));
  ExpectOneLineReasonAndAdvice(o);
}

TEST(Classify, ExitedNonZeroIsTheCommandsOwnFailure) {
  CallOutcome o = outcome(exited(2));
  classify_as(o, false, false);
  EXPECT_EQ(o.termination, Termination::kExited);
  EXPECT_EQ(o.retry, RetryAdvice::kNoRetry);
  EXPECT_THAT(o.reason, HasSubstr("status 2"));
  EXPECT_THAT(o.advice, HasSubstr("output"));
  ExpectOneLineReasonAndAdvice(o);
}

TEST(Classify, KilledByAForeignSignal) {
  CallOutcome o = outcome(signalled(SIGSEGV));
  classify_as(o, false, false);
  EXPECT_EQ(o.termination, Termination::kExited);
  EXPECT_EQ(o.retry, RetryAdvice::kNoRetry);
  EXPECT_THAT(o.reason, HasSubstr("SIGSEGV"));
  ExpectOneLineReasonAndAdvice(o);
}

TEST(Classify, SigxfszUnderAFileSizeGrantNamesTheGrant) {
  CallOutcome o = outcome(signalled(SIGXFSZ));
  o.grant.file_size = MiB(256);
  classify_as(o, false, false);
  EXPECT_EQ(o.termination, Termination::kExited);
  EXPECT_EQ(o.retry, RetryAdvice::kRetryWithSmallerScope);
  EXPECT_THAT(o.reason, HasSubstr("256MiB file_size grant"));
  ExpectOneLineReasonAndAdvice(o);
  // The twin: without the grant it is just a foreign signal.
  CallOutcome bare = outcome(signalled(SIGXFSZ));
  classify_as(bare, false, false);
  EXPECT_EQ(bare.retry, RetryAdvice::kNoRetry);
  EXPECT_THAT(bare.reason, Not(HasSubstr("file_size")));
}

TEST(Classify, Timeout) {
  CallOutcome o = outcome(signalled(SIGKILL));
  o.exec.wall = std::chrono::seconds(10);  // it used its whole limit
  classify_as(o, /*timed_out=*/true, false);
  EXPECT_EQ(o.termination, Termination::kTimeout);
  EXPECT_EQ(o.retry, RetryAdvice::kRetryWithSmallerScope);
  EXPECT_THAT(o.reason, HasSubstr("10s"));
  ExpectOneLineReasonAndAdvice(o);
}

TEST(Classify, TimeoutBeforeTheCallsOwnLimitIsTheRunsDeadline) {
  CallOutcome o = outcome(signalled(SIGKILL));
  o.exec.wall = std::chrono::milliseconds(300);  // well before its 10s
  classify_as(o, /*timed_out=*/true, false);
  EXPECT_EQ(o.termination, Termination::kTimeout);
  EXPECT_THAT(o.reason, HasSubstr("the run's wall-clock limit"));
  EXPECT_THAT(o.reason, Not(HasSubstr("10s")));
}

TEST(Classify, TimeoutWithoutACallTimeoutDoesNotClaimAZeroLimit) {
  // The run's own deadline can end a call whose grant has no timeout of its own.
  CallOutcome o = outcome(signalled(SIGKILL));
  o.grant.timeout = Duration(0);
  classify_as(o, /*timed_out=*/true, false);
  EXPECT_EQ(o.termination, Termination::kTimeout);
  EXPECT_THAT(o.reason, Not(HasSubstr("0ns")));
  ExpectOneLineReasonAndAdvice(o);
}

TEST(Classify, OomKillIsMemoryLimitEvenWhenTheExitSaysSigkill) {
  // An OOM never reaches the agent as exit 137 (docs/DESIGN.md idea 6): neither the raw signal nor
  // a shell's 128+9.
  for (ExitStatus e : {signalled(SIGKILL), exited(137), exited(0)}) {
    CallOutcome o = outcome(e);
    o.observed.oom_kills = 1;
    o.observed.peaks.memory_bytes = MiB(512).value;
    classify_as(o, false, false);
    EXPECT_EQ(o.termination, Termination::kMemoryLimit) << e.describe();
    EXPECT_EQ(o.retry, RetryAdvice::kRetryWithSmallerScope) << e.describe();
    EXPECT_THAT(o.reason, HasSubstr("512MiB"));
    EXPECT_THAT(o.reason, Not(HasSubstr("137")));
    ExpectOneLineReasonAndAdvice(o);
  }
}

TEST(Classify, OomKillOutranksTimeoutAndLadder) {
  CallOutcome o = outcome(signalled(SIGKILL));
  o.observed.oom_kills = 2;
  o.observed.cancelled_by_ladder = true;
  o.observed.ladder_termination = Termination::kCancelled;
  o.observed.ladder_reason = "host pressure";
  classify_as(o, /*timed_out=*/true, /*cancelled_by_caller=*/true);
  EXPECT_EQ(o.termination, Termination::kMemoryLimit);
}

TEST(Classify, OomKillWithoutAMemoryGrantNamesTheRunLimit) {
  CallOutcome o = outcome(signalled(SIGKILL));
  o.grant.memory_max.reset();  // static mode: the run ceiling is the one limit
  o.observed.oom_kills = 1;
  classify_as(o, false, false);
  EXPECT_EQ(o.termination, Termination::kMemoryLimit);
  EXPECT_THAT(o.reason, HasSubstr("run's limit"));
}

TEST(Classify, PidsLimitViaTheLadder) {
  CallOutcome o = outcome(signalled(SIGTERM));
  o.observed.cancelled_by_ladder = true;
  o.observed.ladder_termination = Termination::kPidsLimit;
  o.observed.ladder_reason = "pinned at its limit of 64 processes for 500ms";
  o.observed.pids_refused = 900;
  classify_as(o, false, false);
  EXPECT_EQ(o.termination, Termination::kPidsLimit);
  EXPECT_EQ(o.retry, RetryAdvice::kRetryWithSmallerScope);
  EXPECT_EQ(o.reason, "pinned at its limit of 64 processes for 500ms");
  EXPECT_THAT(o.advice, HasSubstr("64"));
  ExpectOneLineReasonAndAdvice(o);
}

TEST(Classify, PidsLimitViaTheLadderAfterKill) {
  CallOutcome o = outcome(signalled(SIGKILL));
  o.observed.cancelled_by_ladder = true;
  o.observed.killed_by_ladder = true;
  o.observed.ladder_termination = Termination::kPidsLimit;
  o.observed.ladder_reason = "pinned";
  classify_as(o, false, false);
  EXPECT_EQ(o.termination, Termination::kPidsLimit);
  EXPECT_EQ(o.retry, RetryAdvice::kRetryWithSmallerScope);
}

TEST(Classify, PidsRefusedWithANonZeroExit) {
  CallOutcome o = outcome(exited(1));
  o.observed.pids_refused = 3;
  classify_as(o, false, false);
  EXPECT_EQ(o.termination, Termination::kPidsLimit);
  EXPECT_EQ(o.retry, RetryAdvice::kRetryWithSmallerScope);
  EXPECT_THAT(o.reason, HasSubstr("3 fork(s)"));
  EXPECT_THAT(o.reason, HasSubstr("64"));
  ExpectOneLineReasonAndAdvice(o);
}

TEST(Classify, PidsRefusedButSucceededIsJustExited) {
  // The twin: a build that hit the limit once, retried and succeeded is not a failure.
  CallOutcome o = outcome(exited(0));
  o.observed.pids_refused = 3;
  classify_as(o, false, false);
  EXPECT_EQ(o.termination, Termination::kExited);
  EXPECT_EQ(o.retry, RetryAdvice::kNoRetry);
}

TEST(Classify, CancelledByTheCaller) {
  CallOutcome o = outcome(signalled(SIGTERM));
  classify_as(o, false, /*cancelled_by_caller=*/true);
  EXPECT_EQ(o.termination, Termination::kCancelled);
  EXPECT_EQ(o.retry, RetryAdvice::kRetry);
  EXPECT_THAT(o.reason, HasSubstr("caller"));
  ExpectOneLineReasonAndAdvice(o);
}

TEST(Classify, LadderCancelForHostPressureIsRetry) {
  CallOutcome o = outcome(signalled(SIGTERM));
  o.observed.cancelled_by_ladder = true;
  o.observed.ladder_termination = Termination::kCancelled;
  o.observed.ladder_reason = "host memory pressure did not clear within 2s";
  classify_as(o, false, false);
  EXPECT_EQ(o.termination, Termination::kCancelled);
  EXPECT_EQ(o.retry, RetryAdvice::kRetry);
  EXPECT_EQ(o.reason, "host memory pressure did not clear within 2s");
  EXPECT_THAT(o.advice, HasSubstr("pressure"));
  ExpectOneLineReasonAndAdvice(o);
}

TEST(Classify, LadderKillForHostPressureIsRetry) {
  CallOutcome o = outcome(signalled(SIGKILL));
  o.observed.cancelled_by_ladder = true;
  o.observed.killed_by_ladder = true;
  o.observed.ladder_termination = Termination::kCancelled;
  o.observed.ladder_reason = "host memory pressure did not clear";
  classify_as(o, false, false);
  EXPECT_EQ(o.retry, RetryAdvice::kRetry);
  EXPECT_EQ(o.reason, "host memory pressure did not clear");
}

TEST(Classify, LadderOutranksTimeoutAndCaller) {
  CallOutcome o = outcome(signalled(SIGKILL));
  o.observed.cancelled_by_ladder = true;
  o.observed.ladder_termination = Termination::kPidsLimit;
  o.observed.ladder_reason = "pinned";
  classify_as(o, /*timed_out=*/true, /*cancelled_by_caller=*/true);
  EXPECT_EQ(o.termination, Termination::kPidsLimit);
}

TEST(Classify, TimeoutOutranksCallerCancel) {
  CallOutcome o = outcome(signalled(SIGKILL));
  classify_as(o, /*timed_out=*/true, /*cancelled_by_caller=*/true);
  EXPECT_EQ(o.termination, Termination::kTimeout);
}

// --- JSON --------------------------------------------------------------------------------

CallOutcome full_outcome() {
  CallOutcome o = outcome(exited(3));
  o.observed.peaks = {MiB(300).value, 12, 1.5};
  o.observed.cpu_usage_us = 2'500'000;
  o.observed.cpu_throttled_us = 4'000;
  o.observed.pids_refused = 0;
  o.observed.throttled_for = 250ms;
  o.observed.frozen_for = 40ms;
  o.observed.samples = 77;
  o.observed.actions = {{"throttle", 120ms, "memory 470MiB reached 90%"},
                        {"unthrottle", 370ms, "memory back to 100MiB"}};
  o.exec.stdout_data = "out";
  o.exec.stderr_data = "err";
  o.exec.stdout_bytes = 3'000'000;  // as written by the call, kept or not
  o.exec.stderr_bytes = 3;
  o.exec.stdout_truncated = true;
  classify_as(o, false, false);
  return o;
}

TEST(OutcomeJson, HasEveryDocumentedField) {
  Json j = to_json(full_outcome());
  EXPECT_EQ(j.at("call_id"), "call-1");
  EXPECT_EQ(j.at("argv"), Json({"make", "-j4"}));
  EXPECT_EQ(j.at("intent").at("name"), "compile");
  EXPECT_EQ(j.at("intent").at("inferred"), true);
  EXPECT_EQ(j.at("intent").at("because"), "rule /^make/");
  EXPECT_EQ(j.at("grant").at("memory_max"), "512MiB");
  EXPECT_EQ(j.at("grant").at("pids_max"), 64);
  EXPECT_EQ(j.at("grant").at("timeout"), "10s");

  const Json& seen = j.at("observed");
  EXPECT_EQ(seen.at("memory_peak_bytes"), MiB(300).value);
  EXPECT_EQ(seen.at("pids_peak"), 12);
  EXPECT_DOUBLE_EQ(seen.at("cpu_peak_cores").get<double>(), 1.5);
  EXPECT_DOUBLE_EQ(seen.at("cpu_usage_ms").get<double>(), 2500.0);
  EXPECT_DOUBLE_EQ(seen.at("cpu_throttled_ms").get<double>(), 4.0);
  EXPECT_EQ(seen.at("oom_kills"), 0);
  EXPECT_EQ(seen.at("pids_refused"), 0);
  EXPECT_DOUBLE_EQ(seen.at("throttled_ms").get<double>(), 250.0);
  EXPECT_DOUBLE_EQ(seen.at("frozen_ms").get<double>(), 40.0);
  EXPECT_EQ(seen.at("samples"), 77);

  const Json& actions = j.at("actions");
  ASSERT_TRUE(actions.is_array());
  ASSERT_EQ(actions.size(), 2u);
  EXPECT_EQ(actions[0].at("action"), "throttle");
  EXPECT_DOUBLE_EQ(actions[0].at("at_ms").get<double>(), 120.0);
  EXPECT_EQ(actions[0].at("reason"), "memory 470MiB reached 90%");
  EXPECT_EQ(actions[1].at("action"), "unthrottle");

  EXPECT_EQ(j.at("exit").at("code"), 3);
  EXPECT_TRUE(j.at("exit").at("signal").is_null());
  EXPECT_DOUBLE_EQ(j.at("wall_ms").get<double>(), 1500.0);
  EXPECT_EQ(j.at("termination"), "exited");
  EXPECT_THAT(j.at("reason").get<std::string>(), HasSubstr("status 3"));
  EXPECT_EQ(j.at("retry"), "no_retry");
  EXPECT_FALSE(j.at("advice").get<std::string>().empty());
  EXPECT_EQ(j.at("stdout"), "out");
  EXPECT_EQ(j.at("stderr"), "err");
  EXPECT_EQ(j.at("stdout_bytes"), 3'000'000);
  EXPECT_EQ(j.at("stderr_bytes"), 3);
  EXPECT_EQ(j.at("stdout_truncated"), true);
  EXPECT_EQ(j.at("stderr_truncated"), false);
  EXPECT_EQ(j.at("stdout_invalid_utf8"), 0);
  EXPECT_EQ(j.at("stderr_invalid_utf8"), 0);
}

TEST(OutcomeJson, OutputThatIsNotUtf8IsReplacedAndCounted) {
  CallOutcome o = full_outcome();
  o.exec.stdout_data = "ok \xFF\xFE";
  o.exec.stderr_data = "\xC3";  // a character cut in half
  Json j = to_json(o);
  EXPECT_EQ(j.at("stdout"), "ok \xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(j.at("stdout_invalid_utf8"), 2);
  EXPECT_EQ(j.at("stderr_invalid_utf8"), 1);
  EXPECT_NO_THROW((void)j.dump()) << "the reply a server writes must serialise";
}

TEST(OutcomeJson, SignalledExitHasNullCode) {
  CallOutcome o = outcome(signalled(SIGKILL));
  o.observed.oom_kills = 1;
  classify_as(o, false, false);
  Json j = to_json(o);
  EXPECT_TRUE(j.at("exit").at("code").is_null());
  EXPECT_EQ(j.at("exit").at("signal"), SIGKILL);
  EXPECT_EQ(j.at("termination"), "memory_limit");
  EXPECT_EQ(j.at("retry"), "retry_with_smaller_scope");
  EXPECT_EQ(j.at("observed").at("oom_kills"), 1);
  EXPECT_TRUE(j.at("actions").is_array());
  EXPECT_TRUE(j.at("actions").empty());
}

TEST(OutcomeJson, WithoutOutputLeavesOutTheStreams) {
  Json j = to_json(full_outcome(), /*with_output=*/false);
  EXPECT_FALSE(j.contains("stdout"));
  EXPECT_FALSE(j.contains("stderr"));
  EXPECT_FALSE(j.contains("stdout_truncated"));
  EXPECT_FALSE(j.contains("stdout_bytes"));
  EXPECT_TRUE(j.contains("termination"));
}

// The guard's counts, and beside them the peak rate the monitor saw, when it saw one.
TEST(OutcomeJson, NetCarriesThePeakRateWhenOneWasMeasured) {
  CallOutcome o = full_outcome();
  EXPECT_FALSE(to_json(o).at("observed").contains("net"));  // no meter: no net at all
  o.observed.net = CallObservation::NetBytes{5000, 300, 5, 3};
  Json j = to_json(o);
  EXPECT_EQ(j.at("observed").at("net"),
            Json({{"bytes_out", 5000}, {"bytes_in", 300}, {"packets_out", 5}, {"packets_in", 3}}));
  o.observed.peaks.net_bytes_per_s = 1234567.6;
  j = to_json(o);
  EXPECT_EQ(j.at("observed").at("net").at("peak_bytes_per_s"), 1234568);
  EXPECT_EQ(j.at("observed").at("net").at("bytes_out"), 5000);
}

}  // namespace
}  // namespace sandgate::controller
