// The one byte-order codec of chorus: every wire and file format (handshakes, frames, the
// engine's requests, the parameter servers' messages and state files, TFRecord, protobuf
// fields, checkpoint blobs) writes and reads its integers and floats through these
// functions, little-endian whatever the host's byte order (docs/wire_format.md). IDX files
// are the one big-endian format (load_u32_be).
//
// store_* / load_* work on fixed-size buffers whose size the caller has checked; put_*
// append to a std::string; ByteReader reads a buffer of untrusted length and throws
// IoError on short input. Pure functions; a ByteReader is used by one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>

#include "chorus/error.h"

namespace chorus::byte_order {

// ---- fixed-size buffers ----

template <typename U>
inline void store_le(void* out, U v) {
  auto* p = static_cast<uint8_t*>(out);
  for (size_t i = 0; i < sizeof(U); ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
template <typename U>
inline U load_le(const void* in) {
  const auto* p = static_cast<const uint8_t*>(in);
  U v = 0;
  for (size_t i = 0; i < sizeof(U); ++i) v = static_cast<U>(v | static_cast<U>(U{p[i]} << (8 * i)));
  return v;
}

inline void store_u16(void* p, uint16_t v) { store_le(p, v); }
inline void store_u32(void* p, uint32_t v) { store_le(p, v); }
inline void store_u64(void* p, uint64_t v) { store_le(p, v); }
inline uint16_t load_u16(const void* p) { return load_le<uint16_t>(p); }
inline uint32_t load_u32(const void* p) { return load_le<uint32_t>(p); }
inline uint64_t load_u64(const void* p) { return load_le<uint64_t>(p); }

// IDX (MNIST) headers are big-endian.
inline uint32_t load_u32_be(const void* in) {
  const auto* p = static_cast<const uint8_t*>(in);
  return uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 | p[3];
}

// IEEE-754 floats travel as their bit patterns.
inline uint32_t f32_bits(float v) {
  uint32_t b;
  std::memcpy(&b, &v, 4);
  return b;
}
inline uint64_t f64_bits(double v) {
  uint64_t b;
  std::memcpy(&b, &v, 8);
  return b;
}
inline float f32_from_bits(uint32_t b) {
  float v;
  std::memcpy(&v, &b, 4);
  return v;
}
inline double f64_from_bits(uint64_t b) {
  double v;
  std::memcpy(&v, &b, 8);
  return v;
}

// ---- appending to a string ----

template <typename U>
inline void put_le(std::string& out, U v) {
  char b[sizeof(U)];
  store_le(b, v);
  out.append(b, sizeof(U));
}

inline void put_u8(std::string& out, uint8_t v) { out.push_back(static_cast<char>(v)); }
inline void put_u16(std::string& out, uint16_t v) { put_le(out, v); }
inline void put_u32(std::string& out, uint32_t v) { put_le(out, v); }
inline void put_u64(std::string& out, uint64_t v) { put_le(out, v); }
inline void put_i32(std::string& out, int32_t v) { put_le(out, static_cast<uint32_t>(v)); }
inline void put_i64(std::string& out, int64_t v) { put_le(out, static_cast<uint64_t>(v)); }
inline void put_f32(std::string& out, float v) { put_le(out, f32_bits(v)); }
inline void put_f64(std::string& out, double v) { put_le(out, f64_bits(v)); }

// ---- reading untrusted input ----

// Reads fields in order from a buffer it does not own (which must outlive it). Every read
// is checked against the bytes left first: short input throws IoError
//   "<context>: truncated (N bytes wanted at offset P, L left)"
// so a caller's message says which format and which peer or file.
class ByteReader {
 public:
  ByteReader(std::string_view data, std::string context)
      : data_(data), context_(std::move(context)) {}

  uint8_t u8() { return static_cast<uint8_t>(*take(1)); }
  uint16_t u16() { return load_u16(take(2)); }
  uint32_t u32() { return load_u32(take(4)); }
  uint64_t u64() { return load_u64(take(8)); }
  int32_t i32() { return static_cast<int32_t>(u32()); }
  int64_t i64() { return static_cast<int64_t>(u64()); }
  float f32() { return f32_from_bits(u32()); }
  double f64() { return f64_from_bits(u64()); }
  // The next n bytes, as a view into the input.
  std::string_view bytes(size_t n) { return std::string_view(take(n), n); }

  size_t left() const { return data_.size() - pos_; }
  size_t position() const { return pos_; }
  bool at_end() const { return pos_ == data_.size(); }
  const std::string& context() const { return context_; }

  // Throws IoError "<context>: <args...>".
  template <typename... Args>
  [[noreturn]] void fail(const Args&... args) const {
    CHORUS_THROW(IoError, context_, ": ", args...);
  }
  // Throws IoError unless every byte was read.
  void finish() const {
    if (!at_end()) fail(left(), " trailing bytes");
  }

 private:
  const char* take(size_t n) {
    if (n > left())
      fail("truncated (", n, " bytes wanted at offset ", pos_, ", ", left(), " left)");
    const char* p = data_.data() + pos_;
    pos_ += n;
    return p;
  }

  std::string_view data_;
  std::string context_;
  size_t pos_ = 0;
};

}  // namespace chorus::byte_order
