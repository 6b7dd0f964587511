// TensorBoard event files: TFRecord framing (length, masked CRC-32C of the length, payload, masked
// CRC-32C of the payload) around tensorflow.Event protocol buffers, encoded by hand from the field
// numbers of TensorBoard's event.proto / summary.proto / tensor.proto and the hparams plugin's
// plugin_data.proto (tests/track/tb_proto holds those definitions; tests parse our files with them).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

#include "foundry/track/track.h"

namespace foundry::track {

class TbEventWriter {
 public:
  /// Creates <logdir>/events.out.tfevents.<secs>.<host>.<pid>.<n> and writes the file_version event.
  explicit TbEventWriter(const std::string& logdir);
  ~TbEventWriter();
  TbEventWriter(const TbEventWriter&) = delete;
  TbEventWriter& operator=(const TbEventWriter&) = delete;

  const std::string& path() const { return path_; }
  void scalar(const std::string& tag, int64_t step, double wall_time, double value);
  void histogram(const std::string& tag, int64_t step, double wall_time, const Histogram& h);
  void text(const std::string& tag, int64_t step, double wall_time, const std::string& text);
  void image(const std::string& tag, int64_t step, double wall_time, const std::string& png, int64_t height,
             int64_t width, int channels);
  /// The hparams plugin's session_start_info (config flattened with dotted keys; numbers, strings,
  /// booleans); hparams_end writes session_end_info (status: 1 success, 2 failure).
  void hparams_start(const std::string& config_json, double start_time);
  void hparams_end(int status, double end_time);
  void flush();

 private:
  void write_event(double wall_time, int64_t step, const std::string& body_fields);
  void write_hparams(const std::string& tag, int field, const std::string& info, double wall_time);
  std::FILE* f_ = nullptr;
  std::string path_;
};

/// Masked CRC-32C as TFRecord stores it.
uint32_t tfrecord_masked_crc(const std::string& bytes);

}  // namespace foundry::track
