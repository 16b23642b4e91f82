// tf.train.Example (chorus/train/example_proto.h).
#include "chorus/train/example_proto.h"

#include <cstring>

#include "chorus/error.h"
#include "train/io/proto_wire.h"
#include "util/byte_order.h"

namespace chorus {
namespace {

namespace wire = io::proto;

constexpr std::string_view kContext = "tf.train.Example";
constexpr uint32_t kExampleFeatures = 1;
constexpr uint32_t kFeaturesEntry = 1;
constexpr uint32_t kEntryKey = 1, kEntryValue = 2;
constexpr uint32_t kBytesList = 1, kFloatList = 2, kInt64List = 3;  // Feature's oneof
constexpr uint32_t kListValue = 1;

// ---- encoding ----

std::string encode_list(const Feature& f) {
  std::string list;
  if (f.kind == Feature::kBytes) {
    for (const auto& b : f.bytes) wire::put_bytes_field(list, kListValue, b);
    return list;
  }
  std::string packed;
  if (f.kind == Feature::kFloat) {
    for (float v : f.floats) byte_order::put_f32(packed, v);
  } else {
    for (int64_t v : f.ints) wire::put_varint(packed, static_cast<uint64_t>(v));
  }
  if (!packed.empty()) wire::put_bytes_field(list, kListValue, packed);
  return list;
}

void check_kind(const std::string& key, const Feature& f) {
  CHORUS_CHECK_ARG(
      f.kind == Feature::kBytes || f.kind == Feature::kFloat || f.kind == Feature::kInt64,
      "feature '", key, "' has an unknown kind ", static_cast<int>(f.kind));
  CHORUS_CHECK_ARG((f.kind == Feature::kBytes || f.bytes.empty()) &&
                       (f.kind == Feature::kFloat || f.floats.empty()) &&
                       (f.kind == Feature::kInt64 || f.ints.empty()),
                   "feature '", key, "' holds values outside the list of its kind");
}

uint32_t list_field(Feature::Kind kind) {
  return kind == Feature::kBytes ? kBytesList : kind == Feature::kFloat ? kFloatList : kInt64List;
}

// ---- decoding ----

void decode_floats(const wire::Field& f, wire::Reader& outer, std::vector<float>& out) {
  auto push = [&](uint64_t bits) {
    out.push_back(byte_order::f32_from_bits(static_cast<uint32_t>(bits)));
  };
  if (f.type == wire::kFixed32) return push(f.value);
  if (f.type != wire::kLengthDelimited) return;  // an unknown field
  if (f.bytes.size() % 4 != 0)
    outer.fail("packed float list of " + std::to_string(f.bytes.size()) + " bytes");
  out.reserve(out.size() + f.bytes.size() / 4);
  wire::Reader packed(f.bytes, kContext);
  while (!packed.at_end()) push(packed.fixed(4));
}

void decode_ints(const wire::Field& f, std::vector<int64_t>& out) {
  if (f.type == wire::kVarint) return out.push_back(f.as_int64());
  if (f.type != wire::kLengthDelimited) return;
  wire::Reader packed(f.bytes, kContext);
  while (!packed.at_end()) out.push_back(static_cast<int64_t>(packed.varint()));
}

// Merges one occurrence of a list (BytesList, FloatList or Int64List) into `feature`.
void decode_list(std::string_view bytes, Feature::Kind kind, Feature& feature) {
  if (feature.kind != kind) feature = Feature{kind, {}, {}, {}};  // the oneof switches
  wire::Reader r(bytes, kContext);
  wire::Field f;
  while (r.next(f)) {
    if (f.number != kListValue) continue;
    if (kind == Feature::kBytes && f.type == wire::kLengthDelimited) {
      feature.bytes.emplace_back(f.bytes);
    } else if (kind == Feature::kFloat) {
      decode_floats(f, r, feature.floats);
    } else if (kind == Feature::kInt64) {
      decode_ints(f, feature.ints);
    }
  }
}

void decode_feature(std::string_view bytes, Feature& feature) {
  wire::Reader r(bytes, kContext);
  wire::Field f;
  while (r.next(f)) {
    if (f.type != wire::kLengthDelimited) continue;
    if (f.number == kBytesList) decode_list(f.bytes, Feature::kBytes, feature);
    if (f.number == kFloatList) decode_list(f.bytes, Feature::kFloat, feature);
    if (f.number == kInt64List) decode_list(f.bytes, Feature::kInt64, feature);
  }
}

// A map entry replaces an earlier one with the same key (protobuf's map semantics).
void decode_entry(std::string_view bytes, Features& out) {
  std::string key;
  Feature feature;
  wire::Reader r(bytes, kContext);
  wire::Field f;
  while (r.next(f)) {
    if (f.type != wire::kLengthDelimited) continue;
    if (f.number == kEntryKey) key = std::string(f.bytes);
    if (f.number == kEntryValue) decode_feature(f.bytes, feature);
  }
  out[key] = std::move(feature);
}

void decode_features(std::string_view bytes, Features& out) {
  wire::Reader r(bytes, kContext);
  wire::Field f;
  while (r.next(f)) {
    if (f.number == kFeaturesEntry && f.type == wire::kLengthDelimited) decode_entry(f.bytes, out);
  }
}

}  // namespace

std::string encode_example(const Features& features) {
  std::string map;
  for (const auto& [key, feature] : features) {
    check_kind(key, feature);
    std::string value;  // Feature: its one list, present even when empty (oneof)
    wire::put_bytes_field(value, list_field(feature.kind), encode_list(feature));
    std::string entry;
    wire::put_bytes_field(entry, kEntryKey, key);
    wire::put_bytes_field(entry, kEntryValue, value);
    wire::put_bytes_field(map, kFeaturesEntry, entry);
  }
  std::string out;
  wire::put_bytes_field(out, kExampleFeatures, map);
  return out;
}

Features decode_example(std::string_view serialized) {
  Features out;
  wire::Reader r(serialized, kContext);
  wire::Field f;
  while (r.next(f)) {
    if (f.number == kExampleFeatures && f.type == wire::kLengthDelimited) {
      decode_features(f.bytes, out);
    }
  }
  return out;
}

}  // namespace chorus
