// The protobuf wire format by hand, for the few fixed schemas chorus reads and writes
// (TensorBoard's Event, tf.train.Example) without depending on libprotobuf.
//
// A message is a sequence of fields, each a varint key (field_number << 3 | wire_type)
// followed by a value: varint (type 0), 8 little-endian bytes (1), a varint length and
// that many bytes (2: strings, bytes, sub-messages, packed repeated scalars), or 4
// little-endian bytes (5). Writers emit fields in field-number order, as protobuf does.
//
// The reader trusts nothing: every length is checked against the bytes left, varints are
// at most 10 bytes, and malformed input throws InvalidArgument naming `context`.
// Fields of unknown number, or of a known number with an unexpected wire type, are the
// caller's to skip (as protobuf treats them as unknown fields).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace chorus::io::proto {

enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

// ---- writing: each appends one field (key and value) to `out` ----
void put_varint(std::string& out, uint64_t value);  // the bare varint, no key
void put_key(std::string& out, uint32_t field, WireType type);
void put_varint_field(std::string& out, uint32_t field, uint64_t value);
void put_int64_field(std::string& out, uint32_t field, int64_t value);  // negative: 10 bytes
void put_double_field(std::string& out, uint32_t field, double value);
void put_float_field(std::string& out, uint32_t field, float value);
void put_bytes_field(std::string& out, uint32_t field, std::string_view bytes);

// ---- reading ----
struct Field {
  uint32_t number = 0;
  WireType type = kVarint;
  uint64_t value = 0;      // kVarint, kFixed64, kFixed32 (zero-extended)
  std::string_view bytes;  // kLengthDelimited: a view into the reader's input

  int64_t as_int64() const { return static_cast<int64_t>(value); }
  double as_double() const;  // kFixed64
  float as_float() const;    // kFixed32
};

class Reader {
 public:
  // `data` and `context` must outlive the reader.
  Reader(std::string_view data, std::string_view context) : data_(data), context_(context) {}

  // The next field; false at the end of the input.
  bool next(Field& field);
  bool at_end() const { return pos_ == data_.size(); }
  uint64_t varint();         // a bare varint (packed repeated fields)
  uint64_t fixed(int size);  // 4 or 8 little-endian bytes
  [[noreturn]] void fail(const std::string& why) const;

 private:
  std::string_view data_;
  std::string_view context_;
  size_t pos_ = 0;
};

}  // namespace chorus::io::proto
