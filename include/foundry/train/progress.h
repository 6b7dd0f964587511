// A tqdm-like progress bar: percentage, count, rate, elapsed and remaining time, a postfix of
// live values (loss, lr), nested bars. On a terminal it redraws in place and fits the width; when
// the stream is not a terminal (CI logs) it prints a plain line every `log_every_seconds`.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

namespace foundry::train {

class ProgressBar {
 public:
  struct Options {
    std::string desc;
    std::string unit = "it";
    int position = 0;                 ///< nesting level (0 = outermost line)
    double log_every_seconds = 10.0;  ///< plain-line interval when not a terminal
    bool leave = true;                ///< keep the finished bar on screen
    std::FILE* stream = stderr;
    int force_tty = -1;               ///< 1/0 to override terminal detection (tests)
    int width = 0;                    ///< 0: the terminal's width (or 100)
  };

  ProgressBar(int64_t total, Options options);
  explicit ProgressBar(int64_t total, const std::string& desc = "") : ProgressBar(total, Options{desc}) {}
  ~ProgressBar();

  void update(int64_t n = 1);
  /// Values shown after the counts ("loss=1.234"); kept in insertion order.
  void set_postfix(const std::string& key, double value);
  void set_postfix(const std::string& key, const std::string& value);
  void set_description(const std::string& desc);
  void close();

  int64_t count() const { return count_; }
  /// The current line (without cursor control), for tests and logs.
  std::string render() const;

 private:
  void draw(bool final_line);

  int64_t total_;
  int64_t count_ = 0;
  Options opt_;
  bool tty_;
  bool closed_ = false;
  std::chrono::steady_clock::time_point start_, last_draw_;
  std::vector<std::pair<std::string, std::string>> postfix_;
};

/// "01:23" or "1:02:03".
std::string format_duration(double seconds);

}  // namespace foundry::train
