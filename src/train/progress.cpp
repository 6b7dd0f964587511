#include "foundry/train/progress.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <cmath>

#include <fmt/format.h>

namespace foundry::train {

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  int64_t s = int64_t(seconds + 0.5);
  if (s >= 3600) return fmt::format("{}:{:02}:{:02}", s / 3600, (s / 60) % 60, s % 60);
  return fmt::format("{:02}:{:02}", s / 60, s % 60);
}

ProgressBar::ProgressBar(int64_t total, Options options)
    : total_(total), opt_(std::move(options)), start_(std::chrono::steady_clock::now()), last_draw_(start_) {
  tty_ = opt_.force_tty >= 0 ? opt_.force_tty == 1 : ::isatty(::fileno(opt_.stream));
  if (tty_) draw(false);
}

ProgressBar::~ProgressBar() { close(); }

void ProgressBar::update(int64_t n) {
  count_ += n;
  auto now = std::chrono::steady_clock::now();
  double since = std::chrono::duration<double>(now - last_draw_).count();
  bool done = total_ > 0 && count_ >= total_;
  if (tty_ ? (since >= 0.1 || done) : (since >= opt_.log_every_seconds)) draw(false);
}

void ProgressBar::set_postfix(const std::string& key, double value) {
  std::string v = std::fabs(value) >= 1e-3 && std::fabs(value) < 1e4 ? fmt::format("{:.4g}", value) : fmt::format("{:.3g}", value);
  set_postfix(key, v);
}

void ProgressBar::set_postfix(const std::string& key, const std::string& value) {
  for (auto& [k, v] : postfix_)
    if (k == key) {
      v = value;
      return;
    }
  postfix_.emplace_back(key, value);
}

void ProgressBar::set_description(const std::string& desc) { opt_.desc = desc; }

std::string ProgressBar::render() const {
  double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  double rate = elapsed > 0 ? double(count_) / elapsed : 0;
  std::string left = opt_.desc.empty() ? "" : opt_.desc + ": ";
  std::string post;
  for (const auto& [k, v] : postfix_) post += ", " + k + "=" + v;
  std::string rate_s = rate >= 1 || rate == 0 ? fmt::format("{:.2f}{}/s", rate, opt_.unit)
                                              : fmt::format("{:.2f}s/{}", 1.0 / rate, opt_.unit);
  if (total_ <= 0) {
    return fmt::format("{}{}{} [{}, {}{}]", left, count_, opt_.unit, format_duration(elapsed), rate_s, post);
  }
  double frac = std::min(1.0, double(count_) / double(total_));
  double remaining = rate > 0 ? double(total_ - count_) / rate : NAN;
  std::string right = fmt::format("| {}/{} [{}<{}, {}{}]", count_, total_, format_duration(elapsed),
                                  format_duration(remaining), rate_s, post);
  left += fmt::format("{:3d}%|", int(frac * 100));
  int width = opt_.width;
  if (width <= 0) {
    width = 100;
    struct winsize ws;
    if (tty_ && ::ioctl(::fileno(opt_.stream), TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) width = ws.ws_col;
  }
  int bar = width - int(left.size() + right.size());
  if (bar < 3) return left + right.substr(1);
  // Eighth blocks for a smooth bar (as tqdm).
  static const char* parts[] = {"", "▏", "▎", "▍", "▌", "▋", "▊", "▉"};
  double filled = frac * bar;
  int full = int(filled);
  int part = int((filled - full) * 8);
  std::string s;
  for (int i = 0; i < full; ++i) s += "█";
  int used = full;
  if (full < bar && part > 0) {
    s += parts[part];
    used++;
  }
  s.append(size_t(bar - used), ' ');
  return left + s + right;
}

void ProgressBar::draw(bool final_line) {
  last_draw_ = std::chrono::steady_clock::now();
  std::string line = render();
  if (tty_) {
    // Move down to this bar's line, redraw it, and come back up.
    if (opt_.position > 0) std::fprintf(opt_.stream, "%s", std::string(size_t(opt_.position), '\n').c_str());
    std::fprintf(opt_.stream, "\r\x1b[2K%s", line.c_str());
    if (opt_.position > 0) std::fprintf(opt_.stream, "\x1b[%dA\r", opt_.position);
    if (final_line && opt_.position == 0) std::fprintf(opt_.stream, "\n");
  } else {
    std::fprintf(opt_.stream, "%s\n", line.c_str());
  }
  std::fflush(opt_.stream);
}

void ProgressBar::close() {
  if (closed_) return;
  closed_ = true;
  if (opt_.leave || !tty_) draw(true);
  else if (tty_) {
    std::fprintf(opt_.stream, "\r\x1b[2K");
    std::fflush(opt_.stream);
  }
}

}  // namespace foundry::train
