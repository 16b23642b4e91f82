// What the coordinator and its workers say to each other inside frames
// (rendezvous/frame.h) after the "coordinator" handshake. docs/coordinator.md lists every
// message. Each parse_* function checks every length against the limits below and throws
// IoError on anything malformed, so the caller only has to drop the connection.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include "rendezvous/frame.h"

namespace chorus::ps::coordinator {

constexpr const char* kPurpose = "coordinator";  // bound into the handshake MAC
constexpr size_t kMaxFunctionBytes = 256;
constexpr size_t kMaxArgumentBytes = 64u << 20;  // also the limit on a result
constexpr size_t kMaxKindBytes = 32;
constexpr size_t kMaxMessageBytes = 64u << 10;  // longer error messages are cut
// Room for the largest payload plus its ids and length fields.
constexpr uint32_t kMaxFrameBytes = kMaxArgumentBytes + kMaxFunctionBytes + 64;
constexpr uint32_t kMaxWorkerIndex = 1u << 20;

enum class Msg : uint16_t {
  kHello = 1,     // worker -> coordinator: u32 worker_index
  kWelcome = 2,   // coordinator -> worker: u32 heartbeat_timeout_ms
  kReject = 3,    // coordinator -> worker: str message; then close
  kStep = 4,      // coordinator -> worker: i64 step_id, str function, str argument
  kResult = 5,    // worker -> coordinator: i64 step_id, str result
  kError = 6,     // worker -> coordinator: i64 step_id, str kind, str message
  kShutdown = 7,  // coordinator -> worker: empty; the worker returns after its step
  kPing = 8,      // coordinator -> worker: empty
  kPong = 9,      // worker -> coordinator: empty
};

// Error kinds a worker reports.
constexpr const char* kKindUnavailable = "unavailable";
constexpr const char* kKindError = "error";

struct StepMsg {
  int64_t id = 0;
  std::string function;
  std::string argument;
};

struct ReplyMsg {  // kResult or kError
  int64_t id = 0;
  bool ok = true;
  std::string result;  // when ok
  std::string kind;    // when !ok
  std::string message;
};

std::string encode_hello(uint32_t worker_index);
uint32_t parse_hello(const rendezvous::Frame& frame);
std::string encode_welcome(std::chrono::milliseconds heartbeat_timeout);
std::chrono::milliseconds parse_welcome(const rendezvous::Frame& frame);
std::string encode_step(const StepMsg& step);
StepMsg parse_step(const rendezvous::Frame& frame);
std::string encode_reply(const ReplyMsg& reply);
ReplyMsg parse_reply(const rendezvous::Frame& frame);
std::string encode_text(const std::string& text);  // kReject
std::string parse_text(const rendezvous::Frame& frame);
// Throws IoError unless the frame has this type and an empty payload (ping, pong, shutdown).
void check_empty(const rendezvous::Frame& frame);

// Sends / reads one message with a deadline; `what` names it in errors.
void send(int fd, Msg type, const std::string& payload, Deadline deadline, const char* what);
// False when the peer closed cleanly between frames.
bool receive(int fd, Deadline deadline, const char* what, rendezvous::Frame& out);

}  // namespace chorus::ps::coordinator
