// tf.train.Example, the record type of TensorFlow's TFRecord datasets, encoded and
// decoded without libprotobuf.
//
//   Example  { Features features = 1; }
//   Features { map<string, Feature> feature = 1; }   // entry: key = 1, value = 2
//   Feature  { oneof kind { BytesList bytes_list = 1; FloatList float_list = 2;
//                           Int64List int64_list = 3; } }
//   BytesList { repeated bytes value = 1; }
//   FloatList { repeated float value = 1 [packed]; }
//   Int64List { repeated int64 value = 1 [packed]; }
//
// Decoding follows protobuf's rules: packed and unpacked lists are both accepted, repeated
// occurrences merge (lists concatenate, the last oneof member wins, a repeated map key
// replaces the earlier entry), unknown fields are skipped. A Feature with no kind set
// decodes as an empty bytes list. Input is untrusted: malformed bytes throw
// InvalidArgument, never crash; memory use is bounded by a small multiple of the input's
// size.
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace chorus {

struct Feature {
  enum Kind { kBytes, kFloat, kInt64 };
  Kind kind = kBytes;
  // Only the list of `kind` is used; the other two must be empty.
  std::vector<std::string> bytes;
  std::vector<float> floats;
  std::vector<int64_t> ints;
};

using Features = std::map<std::string, Feature>;

// Serialized tf.train.Example, keys in sorted order, lists packed (as TensorFlow writes
// them). InvalidArgument when a feature holds values outside the list of its kind.
std::string encode_example(const Features& features);

Features decode_example(std::string_view serialized);

}  // namespace chorus
