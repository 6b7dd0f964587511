#include "track/tb_events.h"

#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "foundry/core/error.h"
#include "track/util.h"

namespace fs = std::filesystem;

namespace foundry::track {

namespace {

// ---- protocol buffer wire format: varints, length-delimited fields, fixed 32/64-bit values
void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out += char(uint8_t(v) | 0x80);
    v >>= 7;
  }
  out += char(v);
}
void put_tag(std::string& out, int field, int wire_type) { put_varint(out, uint64_t(field) << 3 | uint64_t(wire_type)); }
void put_bytes(std::string& out, int field, const std::string& bytes) {
  put_tag(out, field, 2);
  put_varint(out, bytes.size());
  out += bytes;
}
void put_int(std::string& out, int field, int64_t v) {
  put_tag(out, field, 0);
  put_varint(out, uint64_t(v));
}
void put_double(std::string& out, int field, double v) {
  put_tag(out, field, 1);
  char b[8];
  std::memcpy(b, &v, 8);
  out.append(b, 8);
}
void put_float(std::string& out, int field, float v) {
  put_tag(out, field, 5);
  char b[4];
  std::memcpy(b, &v, 4);
  out.append(b, 4);
}
void put_packed_doubles(std::string& out, int field, const std::vector<double>& v) {
  std::string body;
  for (double d : v) {
    char b[8];
    std::memcpy(b, &d, 8);
    body.append(b, 8);
  }
  put_bytes(out, field, body);
}

// Field numbers (tensorflow/core/framework/summary.proto, tensor.proto, util/event.proto).
enum EventField { kWallTime = 1, kStep = 2, kFileVersion = 3, kSummary = 5 };
enum ValueField { kTag = 1, kSimpleValue = 2, kImage = 4, kHisto = 5, kTensor = 8, kMetadata = 9 };
constexpr int kDtString = 7;
constexpr int kDataClassTensor = 2;

std::string plugin_metadata(const std::string& plugin, const std::string& content, int data_class) {
  std::string plugin_data;
  put_bytes(plugin_data, 1, plugin);
  if (!content.empty()) put_bytes(plugin_data, 2, content);
  std::string md;
  put_bytes(md, 1, plugin_data);
  if (data_class) put_int(md, 4, data_class);
  return md;
}

std::string summary_of(const std::string& value) {
  std::string summary;
  put_bytes(summary, 1, value);
  std::string body;
  put_bytes(body, kSummary, summary);
  return body;
}

// google.protobuf.Value for an hparam: number_value 2, string_value 3, bool_value 4.
std::string proto_value(const nlohmann::json& v) {
  std::string out;
  if (v.is_boolean()) put_int(out, 4, v.get<bool>() ? 1 : 0);
  else if (v.is_number()) put_double(out, 2, v.get<double>());
  else if (v.is_string()) put_bytes(out, 3, v.get<std::string>());
  else put_bytes(out, 3, v.dump());
  return out;
}

std::atomic<int> g_file_counter{0};

}  // namespace

uint32_t tfrecord_masked_crc(const std::string& bytes) {
  uint32_t crc = crc32c(bytes.data(), bytes.size());
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

TbEventWriter::TbEventWriter(const std::string& logdir) {
  fs::create_directories(logdir);
  path_ = (fs::path(logdir) / fmt::format("events.out.tfevents.{}.{}.{}.{}", int64_t(unix_now()), host_name(),
                                          ::getpid(), g_file_counter.fetch_add(1)))
              .string();
  f_ = std::fopen(path_.c_str(), "wb");
  if (!f_) raise<IOError>("cannot create TensorBoard event file '{}': {}", path_, std::strerror(errno));
  std::string body;
  put_bytes(body, kFileVersion, "brain.Event:2");
  write_event(unix_now(), 0, body);
  flush();
}

TbEventWriter::~TbEventWriter() {
  if (f_) std::fclose(f_);
}

void TbEventWriter::write_event(double wall_time, int64_t step, const std::string& body_fields) {
  std::string event;
  put_double(event, kWallTime, wall_time);
  if (step != 0) put_int(event, kStep, step);
  event += body_fields;
  std::string header(8, '\0');
  uint64_t len = event.size();
  std::memcpy(header.data(), &len, 8);  // little-endian on every target we build for
  uint32_t hcrc = tfrecord_masked_crc(header), dcrc = tfrecord_masked_crc(event);
  std::fwrite(header.data(), 1, 8, f_);
  std::fwrite(&hcrc, 1, 4, f_);
  std::fwrite(event.data(), 1, event.size(), f_);
  std::fwrite(&dcrc, 1, 4, f_);
}

void TbEventWriter::scalar(const std::string& tag, int64_t step, double wall_time, double value) {
  std::string v;
  put_bytes(v, kTag, tag);
  put_float(v, kSimpleValue, float(value));
  write_event(wall_time, step, summary_of(v));
}

void TbEventWriter::histogram(const std::string& tag, int64_t step, double wall_time, const Histogram& h) {
  std::string hp;
  put_double(hp, 1, h.min);
  put_double(hp, 2, h.max);
  put_double(hp, 3, h.num);
  put_double(hp, 4, h.sum);
  put_double(hp, 5, h.sum_squares);
  put_packed_doubles(hp, 6, h.bucket_limits);
  put_packed_doubles(hp, 7, h.bucket_counts);
  std::string v;
  put_bytes(v, kTag, tag);
  put_bytes(v, kHisto, hp);
  write_event(wall_time, step, summary_of(v));
}

void TbEventWriter::text(const std::string& tag, int64_t step, double wall_time, const std::string& text) {
  std::string tensor;
  put_int(tensor, 1, kDtString);
  put_bytes(tensor, 2, "");  // tensor_shape {}: a scalar string
  put_bytes(tensor, 8, text);
  std::string v;
  put_bytes(v, kTag, tag);
  put_bytes(v, kMetadata, plugin_metadata("text", "", kDataClassTensor));
  put_bytes(v, kTensor, tensor);
  write_event(wall_time, step, summary_of(v));
}

void TbEventWriter::image(const std::string& tag, int64_t step, double wall_time, const std::string& png,
                          int64_t height, int64_t width, int channels) {
  std::string img;
  put_int(img, 1, height);
  put_int(img, 2, width);
  put_int(img, 3, channels);
  put_bytes(img, 4, png);
  std::string v;
  put_bytes(v, kTag, tag);
  put_bytes(v, kImage, img);
  write_event(wall_time, step, summary_of(v));
}

void TbEventWriter::hparams_start(const std::string& config_json, double start_time) {
  std::string start;
  for (auto& [k, v] : flatten_json(nlohmann::json::parse(config_json, nullptr, false))) {
    if (v.is_null() || v.is_object()) continue;
    std::string entry;  // map<string, Value> entry: key 1, value 2
    put_bytes(entry, 1, k);
    put_bytes(entry, 2, proto_value(v));
    put_bytes(start, 1, entry);
  }
  put_double(start, 5, start_time);
  write_hparams("_hparams_/session_start_info", 3, start, start_time);
}

void TbEventWriter::hparams_end(int status, double end_time) {
  std::string end;  // SessionEndInfo: status 1, end_time_secs 2
  put_int(end, 1, status);
  put_double(end, 2, end_time);
  write_hparams("_hparams_/session_end_info", 4, end, end_time);
}

void TbEventWriter::write_hparams(const std::string& tag, int field, const std::string& info, double wall_time) {
  std::string plugin_data;  // HParamsPluginData: version 1 (must be 0), session_start_info 3, session_end_info 4
  put_int(plugin_data, 1, 0);
  put_bytes(plugin_data, field, info);
  std::string v;  // the data lives in the metadata only; the value itself stays empty
  put_bytes(v, kTag, tag);
  put_bytes(v, kMetadata, plugin_metadata("hparams", plugin_data, 0));
  write_event(wall_time, 0, summary_of(v));
}

void TbEventWriter::flush() {
  if (f_) std::fflush(f_);
}

}  // namespace foundry::track
