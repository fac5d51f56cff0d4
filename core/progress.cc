#include "core/progress.h"

#include <fmt/format.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "core/terminal_text.h"

namespace sandgate {
namespace {

std::string safe_lines(std::string_view text) {
  if (!text.empty() && text.back() == '\n') text.remove_suffix(1);
  std::string out;
  size_t start = 0;
  for (;;) {
    size_t nl = text.find('\n', start);
    out += terminal_safe(text.substr(start, nl == std::string_view::npos ? nl : nl - start));
    out += '\n';
    if (nl == std::string_view::npos) return out;
    start = nl + 1;
  }
}

}  // namespace

// Columns taken by terminal_safe'd text, counted as fit_columns counts them.
static size_t columns_of(std::string_view safe) {
  size_t used = 0;
  for (size_t i = 0; i < safe.size();) {
    char32_t cp = 0;
    size_t len = decode_utf8(safe, i, &cp);
    used += cp >= 0x1100 ? 2 : 1;
    i += len > 0 ? len : 1;
  }
  return used;
}

std::string fit_columns(std::string_view text, size_t columns) {
  std::string safe = terminal_safe(text);
  // Where the text would be cut with room for the "…" (one column), and whether it must be.
  size_t used = 0, cut_at = 0;
  bool cut_found = false;
  for (size_t i = 0; i < safe.size();) {
    char32_t cp = 0;
    size_t len = decode_utf8(safe, i, &cp);  // safe is valid UTF-8: len >= 1
    size_t w = cp >= 0x1100 ? 2 : 1;
    if (!cut_found && used + w > (columns > 0 ? columns - 1 : 0)) {
      cut_at = i;
      cut_found = true;
    }
    if (used + w > columns) return safe.substr(0, cut_at) + (columns > 0 ? "…" : "");
    used += w;
    i += len;
  }
  return safe;
}

Progress::Progress(Options options)
    : options_(options), terminal_([&] {
        if (options.mode != Mode::kAuto) return options.mode == Mode::kTerminal;
        if (::isatty(options.fd) != 1) return false;
        const char* term = std::getenv("TERM");
        return !(term && std::strcmp(term, "dumb") == 0);
      }()) {}

Progress::~Progress() { clear(); }

void Progress::write_locked(std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::write(options_.fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // progress is best effort: a closed stderr must not stop the work
    data.remove_prefix(static_cast<size_t>(n));
  }
}

size_t Progress::width_locked() const {
  if (options_.width > 0) return options_.width;
  struct winsize ws {};
  if (::ioctl(options_.fd, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  return 80;
}

void Progress::draw_locked() {
  // One column short of the width: a character in the last column leaves some terminals
  // waiting to wrap, and the next "\r" would then return to the line below.
  size_t width = width_locked();
  size_t room = width > 1 ? width - 1 : 1;
  std::string text;
  if (detail_.empty()) {
    text = fit_columns(step_, room);
  } else {
    std::string detail = terminal_safe(detail_);
    size_t detail_cols = columns_of(detail);
    // The step cut to what the detail leaves (at least a few columns of it), else both cut.
    if (detail_cols + 1 + 8 <= room)
      text = fit_columns(step_, room - detail_cols - 1) + " " + detail;
    else
      text = fit_columns(step_ + " " + detail_, room);
  }
  if (text == drawn_) return;  // the same on the screen: not drawn again
  write_locked("\r" + text + "\x1b[K");
  drawn_ = std::move(text);
}

void Progress::status(std::string_view step, std::string_view detail) {
  std::lock_guard lock(mu_);
  if (terminal_) {
    step_ = step;
    detail_ = detail;
    draw_locked();
    return;
  }
  if (step == last_step_) return;
  last_step_ = step;
  write_locked(terminal_safe(step) + "\n");
}

void Progress::line(std::string_view text) {
  std::lock_guard lock(mu_);
  if (!terminal_) {
    write_locked(safe_lines(text));
    return;
  }
  std::string out = drawn_.empty() ? "" : "\r\x1b[K";
  out += safe_lines(text);
  write_locked(out);
  drawn_.clear();
  if (!step_.empty() || !detail_.empty()) draw_locked();
}

void Progress::clear() {
  std::lock_guard lock(mu_);
  if (terminal_ && !drawn_.empty()) write_locked("\r\x1b[K");
  drawn_.clear();
  step_.clear();
  detail_.clear();
  last_step_.clear();
}

std::function<void(const std::string&)> Progress::reporter(std::string prefix, std::string step) {
  if (step.empty())
    return [this, prefix = std::move(prefix)](const std::string& text) {
      status(prefix + ": " + text);
    };
  return [this, whole = prefix + ": " + step](const std::string& text) { status(whole, text); };
}

}  // namespace sandgate
