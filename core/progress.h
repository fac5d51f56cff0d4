// Progress of long work (qualify, probe, replay) on stderr, fit for both places it is read.
//
// On a terminal: one status line kept up to date in place ("\r" + clear to end of line,
// "\x1b[K"), cut to the terminal's width (TIOCGWINSZ, read at each redraw) so that it never
// wraps and leaves a trail; permanent lines (findings, errors) are printed above it.
// Anywhere else (a CI log, a pipe, a file): plain complete lines, one per step, never a "\r" or
// an escape sequence, and a step that did not change is not printed again.
//
// In core rather than cli/ so that it is tested in core_test, and so that probes/ or replay/ may
// report through it one day without reaching up a layer. Every text goes through
// terminal_safe(): step names carry provider names, trace ids and error messages, some of which
// came out of a sandbox. reports::clean_text is the full treatment, but core may not include
// reports/ (ci/check-layers), and a status line needs only the part that keeps the terminal
// safe, so core has its own small sanitiser (core/terminal_text.h, shared with exec's output).
//
// Thread-safe: replay reports each finished call from its worker threads.
#pragma once

#include <functional>
#include <mutex>
#include <string>
#include <string_view>

#include "core/terminal_text.h"  // terminal_safe()

namespace sandgate {

// The first characters of `text` (terminal_safe'd) that fit in `columns` terminal columns,
// ending in "…" when cut. A code point from U+1100 up counts as two columns (East Asian wide,
// emoji) and any other as one: it may cut a little early, never late, so the line never wraps.
std::string fit_columns(std::string_view text, size_t columns);

class Progress {
 public:
  enum class Mode {
    kAuto,      // kTerminal when the fd is a terminal and TERM is not "dumb", else kLines
    kTerminal,  // one status line updated in place
    kLines,     // plain lines
  };
  struct Options {
    int fd = 2;
    Mode mode = Mode::kAuto;
    // Terminal columns; 0: asked of the fd (TIOCGWINSZ) at each redraw, 80 if it cannot say.
    size_t width = 0;
  };

  Progress() : Progress(Options{}) {}
  explicit Progress(Options options);
  ~Progress();  // clear()
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  // The work is now at `step`, more precisely at `detail` ("round 3/9", a call just done).
  // Terminal: the status line becomes "step detail"; when it is too wide the step is cut, not
  // the detail, so the count that moves stays in sight. Lines: "step" is printed when it differs
  // from the last step printed; `detail` is not (a CI log wants one line per step, not one
  // per call or round).
  void status(std::string_view step, std::string_view detail = {});

  // A permanent line (a finding, an error, a summary), whole, in both modes; on a terminal
  // above the status line, which is drawn again below it. A '\n' inside `text` is kept as a
  // line break, each line made safe.
  void line(std::string_view text);

  // Terminal: erases the status line (before the results go to stdout, or at the end).
  // Lines: nothing to erase. The next status() is printed even if it names the same step.
  void clear();

  // A callback for the options that take one (SuiteOptions::progress,
  // ExperimentOptions::progress). With `step` empty, each text is a step: status(prefix +
  // ": " + text). Otherwise each text is a detail of that step: status(prefix + ": " + step,
  // text). The Progress must outlive the callback.
  std::function<void(const std::string&)> reporter(std::string prefix, std::string step = {});

  bool terminal() const { return terminal_; }

 private:
  void write_locked(std::string_view data);
  size_t width_locked() const;
  void draw_locked();

  const Options options_;
  const bool terminal_;
  std::mutex mu_;
  std::string step_, detail_;  // terminal: the status line as last given, whole
  std::string drawn_;          // terminal: the status line on the screen ("": none)
  std::string last_step_;      // lines: the last step printed
};

}  // namespace sandgate
