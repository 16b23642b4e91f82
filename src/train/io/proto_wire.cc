#include "train/io/proto_wire.h"

#include "chorus/error.h"
#include "util/byte_order.h"

namespace chorus::io::proto {

void put_varint(std::string& out, uint64_t value) {
  while (value >= 0x80) {
    out.push_back(static_cast<char>((value & 0x7f) | 0x80));
    value >>= 7;
  }
  out.push_back(static_cast<char>(value));
}

void put_key(std::string& out, uint32_t field, WireType type) {
  put_varint(out, (uint64_t{field} << 3) | type);
}

void put_varint_field(std::string& out, uint32_t field, uint64_t value) {
  put_key(out, field, kVarint);
  put_varint(out, value);
}

void put_int64_field(std::string& out, uint32_t field, int64_t value) {
  put_varint_field(out, field, static_cast<uint64_t>(value));
}

void put_double_field(std::string& out, uint32_t field, double value) {
  put_key(out, field, kFixed64);
  byte_order::put_f64(out, value);
}

void put_float_field(std::string& out, uint32_t field, float value) {
  put_key(out, field, kFixed32);
  byte_order::put_f32(out, value);
}

void put_bytes_field(std::string& out, uint32_t field, std::string_view bytes) {
  put_key(out, field, kLengthDelimited);
  put_varint(out, bytes.size());
  out.append(bytes);
}

double Field::as_double() const { return byte_order::f64_from_bits(value); }

float Field::as_float() const { return byte_order::f32_from_bits(static_cast<uint32_t>(value)); }

void Reader::fail(const std::string& why) const {
  CHORUS_THROW(InvalidArgument, context_, ": malformed protobuf at byte ", pos_, " of ",
               data_.size(), ": ", why);
}

uint64_t Reader::varint() {
  uint64_t v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (at_end()) fail("truncated varint");
    auto b = static_cast<uint8_t>(data_[pos_++]);
    v |= uint64_t{b & 0x7fu} << shift;
    if ((b & 0x80) == 0) return v;
  }
  fail("varint longer than 10 bytes");
}

uint64_t Reader::fixed(int size) {
  if (data_.size() - pos_ < static_cast<size_t>(size)) {
    fail("truncated fixed" + std::to_string(size * 8) + " value");
  }
  const char* p = data_.data() + pos_;
  pos_ += static_cast<size_t>(size);
  return size == 8 ? byte_order::load_u64(p) : byte_order::load_u32(p);
}

bool Reader::next(Field& field) {
  if (at_end()) return false;
  const uint64_t key = varint();
  const uint64_t number = key >> 3;
  if (number == 0 || number > 0x1fffffff) fail("invalid field number " + std::to_string(number));
  field.number = static_cast<uint32_t>(number);
  field.type = static_cast<WireType>(key & 7);
  field.value = 0;
  field.bytes = {};
  switch (field.type) {
    case kVarint:
      field.value = varint();
      break;
    case kFixed64:
      field.value = fixed(8);
      break;
    case kFixed32:
      field.value = fixed(4);
      break;
    case kLengthDelimited: {
      const uint64_t length = varint();
      if (length > data_.size() - pos_) {
        fail("length " + std::to_string(length) + " exceeds the " +
             std::to_string(data_.size() - pos_) + " bytes left");
      }
      field.bytes = data_.substr(pos_, length);
      pos_ += length;
      break;
    }
    default:  // 3 and 4 are the long-deprecated groups, 6 and 7 do not exist
      fail("unsupported wire type " + std::to_string(key & 7) + " in field " +
           std::to_string(number));
  }
  return true;
}

}  // namespace chorus::io::proto
