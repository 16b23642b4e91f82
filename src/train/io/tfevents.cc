// TensorBoard event files (chorus/train/tfevents.h).
#include "chorus/train/tfevents.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <optional>
#include <set>
#include <string_view>

#include "chorus/error.h"
#include "train/io/proto_wire.h"
#include "util/byte_order.h"
#include "util/log.h"

namespace chorus {
namespace {

namespace wire = io::proto;

// Field numbers of tensorflow.Event, Summary and Summary.Value (event.proto, summary.proto).
constexpr uint32_t kEventWallTime = 1, kEventStep = 2, kEventFileVersion = 3, kEventSummary = 5;
constexpr uint32_t kSummaryValue = 1;
constexpr uint32_t kValueTag = 1, kValueSimpleValue = 2, kValueTensor = 8, kValueMetadata = 9;
// TF2 scalars: a TensorProto (tensor.proto) under SummaryMetadata.plugin_data.plugin_name
// "scalars" (summary.proto).
constexpr uint32_t kMetadataPluginData = 1, kPluginName = 1;
constexpr uint32_t kTensorDtype = 1, kTensorContent = 4, kTensorFloatVal = 5, kTensorDoubleVal = 6;
constexpr uint64_t kDtFloat = 1, kDtDouble = 2;  // types.proto
constexpr std::string_view kScalarsPlugin = "scalars";

double now_seconds() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

// proto3 omits fields holding their default value; +0.0 is the default of a double.
void put_event_header(std::string& out, double wall_time, int64_t step) {
  if (wall_time != 0 || std::signbit(wall_time)) {
    wire::put_double_field(out, kEventWallTime, wall_time);
  }
  if (step != 0) wire::put_int64_field(out, kEventStep, step);
}

std::string encode_file_version_event(double wall_time) {
  std::string out;
  put_event_header(out, wall_time, 0);
  wire::put_bytes_field(out, kEventFileVersion, "brain.Event:2");
  return out;
}

std::string encode_scalar_event(const std::string& tag, float value, int64_t step,
                                double wall_time) {
  std::string v;  // Summary.Value; simple_value is in a oneof, so always present
  if (!tag.empty()) wire::put_bytes_field(v, kValueTag, tag);
  wire::put_float_field(v, kValueSimpleValue, value);
  std::string summary;
  wire::put_bytes_field(summary, kSummaryValue, v);
  std::string out;
  put_event_header(out, wall_time, step);
  wire::put_bytes_field(out, kEventSummary, summary);
  return out;
}

std::string hostname() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

// Unique per process by the pid and a counter: no two writers share a file.
std::string new_event_path(const std::string& log_dir) {
  static std::atomic<int> writers{0};
  std::error_code ec;
  std::filesystem::create_directories(log_dir, ec);
  if (ec) CHORUS_THROW(IoError, "cannot create event directory ", log_dir, ": ", ec.message());
  std::string path = log_dir + "/events.out.tfevents." +
                     std::to_string(static_cast<int64_t>(now_seconds())) + "." + hostname() + "." +
                     std::to_string(::getpid());
  int n = writers.fetch_add(1);
  return n == 0 ? path : path + "." + std::to_string(n);
}

// ---- reading ----

struct Event {
  double wall_time = 0;
  int64_t step = 0;
  std::string file_version;
  std::vector<std::string_view> summaries;  // repeated occurrences merge
};

Event parse_event(std::string_view bytes, std::string_view context) {
  Event e;
  wire::Reader r(bytes, context);
  wire::Field f;
  while (r.next(f)) {
    if (f.number == kEventWallTime && f.type == wire::kFixed64) e.wall_time = f.as_double();
    if (f.number == kEventStep && f.type == wire::kVarint) e.step = f.as_int64();
    if (f.number == kEventFileVersion && f.type == wire::kLengthDelimited) {
      e.file_version = std::string(f.bytes);
    }
    if (f.number == kEventSummary && f.type == wire::kLengthDelimited) {
      e.summaries.push_back(f.bytes);
    }
  }
  return e;
}

// Summary.Value's `value` oneof: simple_value, old-style histogram, image, histo, audio,
// tensor (7 is node_name and 9 metadata, outside the oneof).
bool in_value_oneof(uint32_t field) { return (field >= 2 && field <= 6) || field == 8; }

// SummaryMetadata.plugin_data.plugin_name, or "" when absent.
std::string_view plugin_name(std::string_view metadata, std::string_view context) {
  std::string_view name;
  wire::Reader r(metadata, context);
  wire::Field f;
  while (r.next(f)) {
    if (f.number != kMetadataPluginData || f.type != wire::kLengthDelimited) continue;
    wire::Reader plugin(f.bytes, context);
    wire::Field p;
    while (plugin.next(p)) {
      if (p.number == kPluginName && p.type == wire::kLengthDelimited) name = p.bytes;
    }
  }
  return name;
}

// Appends the values of a repeated float (size 4) or double (size 8) field, packed or not.
void append_values(const wire::Field& f, int size, std::string_view context,
                   std::vector<double>& out) {
  auto push = [&](uint64_t bits) {
    out.push_back(size == 4 ? byte_order::f32_from_bits(static_cast<uint32_t>(bits))
                            : byte_order::f64_from_bits(bits));
  };
  if (f.type == (size == 4 ? wire::kFixed32 : wire::kFixed64)) return push(f.value);
  if (f.type != wire::kLengthDelimited) return;
  wire::Reader packed(f.bytes, context);
  while (!packed.at_end()) push(packed.fixed(size));
}

// The value of a TensorProto holding one DT_FLOAT or DT_DOUBLE, in float_val / double_val
// or in tensor_content; false for anything else.
bool tensor_scalar(std::string_view tensor, std::string_view context, float& value) {
  uint64_t dtype = 0;
  std::vector<double> values;
  std::string_view content;
  wire::Reader r(tensor, context);
  wire::Field f;
  while (r.next(f)) {
    if (f.number == kTensorDtype && f.type == wire::kVarint) dtype = f.value;
    if (f.number == kTensorContent && f.type == wire::kLengthDelimited) content = f.bytes;
    if (f.number == kTensorFloatVal) append_values(f, 4, context, values);
    if (f.number == kTensorDoubleVal) append_values(f, 8, context, values);
  }
  if (dtype != kDtFloat && dtype != kDtDouble) return false;
  const size_t size = dtype == kDtFloat ? 4 : 8;
  if (!content.empty()) {  // tensor_content takes precedence over the repeated fields
    if (content.size() != size) return false;
    value =
        size == 4
            ? byte_order::f32_from_bits(byte_order::load_u32(content.data()))
            : static_cast<float>(byte_order::f64_from_bits(byte_order::load_u64(content.data())));
    return true;
  }
  if (values.size() != 1) return false;
  value = static_cast<float>(values[0]);
  return true;
}

// Appends the scalar of one Summary.Value, if it is one: a simple_value, or a tensor of
// the "scalars" plugin. TensorFlow may write a tag's metadata only with its first value,
// so `scalar_tags` remembers the tags seen with that plugin.
void parse_value(std::string_view bytes, std::string_view context, const Event& e,
                 std::set<std::string>& scalar_tags, std::vector<ScalarEvent>& out) {
  ScalarEvent s{{}, 0, e.step, e.wall_time};
  uint32_t member = 0;  // the `value` oneof member seen last wins, as in protobuf
  std::string_view tensor;
  std::optional<std::string_view> metadata;
  wire::Reader r(bytes, context);
  wire::Field f;
  while (r.next(f)) {
    if (f.number == kValueTag && f.type == wire::kLengthDelimited) s.tag = std::string(f.bytes);
    if (f.number == kValueMetadata && f.type == wire::kLengthDelimited) metadata = f.bytes;
    if (f.number == kValueSimpleValue && f.type == wire::kFixed32) {
      s.value = f.as_float();
      member = kValueSimpleValue;
    } else if (f.number == kValueTensor && f.type == wire::kLengthDelimited) {
      tensor = f.bytes;
      member = kValueTensor;
    } else if (in_value_oneof(f.number)) {
      member = f.number;  // a later member of the `value` oneof replaced it
    }
  }
  if (member == kValueSimpleValue) {
    out.push_back(std::move(s));
    return;
  }
  if (member != kValueTensor) return;
  const std::string_view plugin = metadata ? plugin_name(*metadata, context) : "";
  if (plugin == kScalarsPlugin) scalar_tags.insert(s.tag);
  const bool scalars = plugin == kScalarsPlugin || (!metadata && scalar_tags.count(s.tag) != 0);
  if (scalars && tensor_scalar(tensor, context, s.value)) out.push_back(std::move(s));
}

void parse_summary(std::string_view bytes, std::string_view context, const Event& e,
                   std::set<std::string>& scalar_tags, std::vector<ScalarEvent>& out) {
  wire::Reader r(bytes, context);
  wire::Field f;
  while (r.next(f)) {
    if (f.number == kSummaryValue && f.type == wire::kLengthDelimited) {
      parse_value(f.bytes, context, e, scalar_tags, out);
    }
  }
}

std::string record_context(const std::string& path, uint64_t offset) {
  return "event file " + path + ", record at byte offset " + std::to_string(offset);
}

}  // namespace

EventWriter::EventWriter(const std::string& log_dir)
    : path_(new_event_path(log_dir)), writer_(path_) {
  writer_.write(encode_file_version_event(now_seconds()));
  writer_.flush();
}

EventWriter::~EventWriter() {
  try {
    std::lock_guard<std::mutex> lock(mu_);
    writer_.close();
  } catch (const std::exception& e) {
    CHORUS_LOG(kError, "tfevents") << e.what();
  }
}

void EventWriter::add_scalar(const std::string& tag, float value, int64_t step) {
  add_scalar(tag, value, step, now_seconds());
}

void EventWriter::add_scalar(const std::string& tag, float value, int64_t step, double wall_time) {
  std::string event = encode_scalar_event(tag, value, step, wall_time);
  std::lock_guard<std::mutex> lock(mu_);
  writer_.write(event);
}

void EventWriter::flush() {
  std::lock_guard<std::mutex> lock(mu_);
  writer_.flush();
}

std::vector<ScalarEvent> read_scalars(const std::string& path) {
  TFRecordReader reader(path);
  std::vector<ScalarEvent> out;
  std::set<std::string> scalar_tags;  // tags whose tensors are scalars-plugin values
  std::string record;
  for (uint64_t at = reader.offset(); reader.read(record); at = reader.offset()) {
    const std::string context = record_context(path, at);
    Event e = parse_event(record, context);
    for (std::string_view summary : e.summaries) {
      parse_summary(summary, context, e, scalar_tags, out);
    }
  }
  return out;
}

std::string read_file_version(const std::string& path) {
  TFRecordReader reader(path);
  std::string record;
  if (!reader.read(record)) CHORUS_THROW(InvalidArgument, "event file ", path, " holds no record");
  return parse_event(record, record_context(path, 0)).file_version;
}

}  // namespace chorus
