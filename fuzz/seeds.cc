// fuzz_seeds OUT_DIR: writes each fuzz target's seed corpus, OUT_DIR/<target>/seed-<name>,
// with chorus's own writers (write_frame, wire::send, encode_requests, TFRecordWriter,
// EventWriter, encode_manifest, ...), so the fuzzers start from well-formed input and mutate
// toward the edges. Bytes sent on a socket are captured from the other end of a socketpair.
// The text formats with no writer in the library (hostfiles, launcher environments) are
// written as chorusrun and the docs show them. scripts/fuzz runs this before each target.
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <thread>

#include "chorus/train/example_proto.h"
#include "chorus/train/tfevents.h"
#include "chorus/train/tfrecord.h"
#include "engine/request.h"
#include "ps/coordinator/protocol.h"
#include "ps/layout.h"
#include "ps/ps_state.h"
#include "ps/wire.h"
#include "rendezvous/auth.h"
#include "rendezvous/frame.h"
#include "rendezvous/store_protocol.h"
#include "train/checkpoint/manifest.h"
#include "transport/handshake.h"
#include "transport/shm/shm_segment.h"
#include "util/byte_order.h"
#include "util/net.h"

namespace chorus::fuzz {
namespace {

namespace fs = std::filesystem;
using rendezvous::PayloadWriter;

fs::path g_out;

void write_seed(const std::string& target, const std::string& name, const std::string& bytes) {
  fs::create_directories(g_out / target);
  std::ofstream(g_out / target / ("seed-" + name), std::ios::binary) << bytes;
}

Deadline soon() { return Deadline::after(std::chrono::seconds(5)); }

// The bytes `write` sends on a socket (small enough for the socket's buffer).
std::string captured(const std::function<void(int)>& write) {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) std::abort();
  net::Fd a(fds[0]), b(fds[1]);
  write(a.get());
  ::shutdown(a.get(), SHUT_WR);
  std::string out;
  char buf[65536];
  for (ssize_t n; (n = ::recv(b.get(), buf, sizeof(buf), 0)) > 0;) out.append(buf, n);
  return out;
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// --- store ----------------------------------------------------------------------------

void frame(int fd, rendezvous::StoreOp op, const std::string& payload) {
  rendezvous::write_frame(fd, static_cast<uint16_t>(op), payload, soon(), "seed");
}

void store_seeds() {
  using rendezvous::StoreOp;
  write_seed("store_server", "set-get-add", captured([](int fd) {
               frame(fd, StoreOp::kSet, PayloadWriter().str("rank/0").str("10.0.0.1:29500").take());
               frame(fd, StoreOp::kGet, PayloadWriter().str("rank/0").i64(100).take());
               frame(fd, StoreOp::kAdd, PayloadWriter().str("barrier").i64(1).take());
               frame(fd, StoreOp::kAdd, PayloadWriter().str("barrier").i64(-3).take());
             }));
  write_seed("store_server", "check-remove-wait", captured([](int fd) {
               frame(fd, StoreOp::kSet, PayloadWriter().str("a").str("1").take());
               frame(fd, StoreOp::kCheck, PayloadWriter().strs({"a", "b"}).take());
               frame(fd, StoreOp::kWait, PayloadWriter().strs({"a"}).i64(10).take());
               frame(fd, StoreOp::kRemove, PayloadWriter().str("a").take());
               frame(fd, StoreOp::kGet, PayloadWriter().str("a").i64(1).take());
             }));
  write_seed("store_frame", "replies", captured([](int fd) {
               frame(fd, StoreOp::kOk, PayloadWriter().str("value").take());
               frame(fd, StoreOp::kOk, PayloadWriter().u8(1).take());
               frame(fd, StoreOp::kOk, PayloadWriter().i64(42).take());
               frame(fd, StoreOp::kOk, "");
               frame(fd, StoreOp::kTimeout, PayloadWriter().strs({"x", "y"}).take());
               frame(fd, StoreOp::kError, PayloadWriter().str("add on a non-integer").take());
             }));
}

// --- handshake --------------------------------------------------------------------------

// Copies bytes between two sockets in both directions, recording each direction, until
// both ends have closed.
void relay(int client, int server, std::string& to_server, std::string& to_client) {
  char buf[4096];
  bool client_open = true, server_open = true;
  while (client_open || server_open) {
    pollfd p[2] = {{client, POLLIN, 0}, {server, POLLIN, 0}};
    if (::poll(p, 2, 5000) <= 0) return;
    if (client_open && p[0].revents) {
      ssize_t n = ::recv(client, buf, sizeof(buf), 0);
      client_open = n > 0;
      if (n > 0) to_server.append(buf, n), net::send_all(server, buf, n, soon(), "relay");
    }
    if (server_open && p[1].revents) {
      ssize_t n = ::recv(server, buf, sizeof(buf), 0);
      server_open = n > 0;
      if (n > 0) to_client.append(buf, n), net::send_all(client, buf, n, soon(), "relay");
    }
  }
}

// A real handshake between authenticate_client and authenticate_server, recorded: the
// server-role seed is what the client sent, the client-role seed what the server sent
// (auth_fuzz's first byte picks the role).
void auth_seeds() {
  int c[2], s[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM, 0, c) != 0 || ::socketpair(AF_UNIX, SOCK_STREAM, 0, s))
    std::abort();
  const Secret secret("fuzz secret");
  std::thread client([&] {
    rendezvous::authenticate_client(c[0], secret, "store", soon());
    ::close(c[0]);
  });
  std::thread server([&] {
    rendezvous::authenticate_server(s[0], secret, "store", soon());
    ::close(s[0]);
  });
  std::string to_server, to_client;
  relay(c[1], s[1], to_server, to_client);
  client.join();
  server.join();
  ::close(c[1]);
  ::close(s[1]);
  write_seed("auth", "server-role", std::string(1, '\1') + to_server);
  write_seed("auth", "client-role", std::string(1, '\0') + to_client);
}

// --- transport -------------------------------------------------------------------------

void hello_seeds() {
  net::Fd memfd;
  transport::shm::Segment segment = transport::shm::Segment::create(4096, memfd);
  std::string header(4096, '\0');
  if (::pread(memfd.get(), header.data(), header.size(), 0) != 4096) std::abort();
  transport::Hello hello;
  hello.kind = transport::LinkKind::kShm;
  hello.from_rank = 0;
  hello.to_rank = 1;
  hello.size = 2;
  hello.ring_bytes = 4096;
  hello.group = transport::random_token();
  hello.token = transport::random_token();
  uint8_t wire[transport::Hello::kWireBytes], reply[transport::kReplyBytes];
  hello.encode(wire);
  transport::encode_reply(transport::HelloStatus::kAccepted, reply);
  std::string hello_bytes(reinterpret_cast<char*>(wire), sizeof(wire));
  std::string reply_bytes(reinterpret_cast<char*>(reply), sizeof(reply));
  write_seed("transport_hello", "shm", hello_bytes + reply_bytes + header);
  hello.kind = transport::LinkKind::kTcp;
  hello.ring_bytes = 0;
  hello.encode(wire);
  transport::encode_reply(transport::HelloStatus::kWrongRingSize, reply);
  write_seed("transport_hello", "tcp",
             std::string(reinterpret_cast<char*>(wire), sizeof(wire)) +
                 std::string(reinterpret_cast<char*>(reply), sizeof(reply)));
  write_seed("transport_hello", "token", transport::token_hex(hello.token));
}

// shm_ring_fuzz's script: capacity byte, then ops (op, n_hi, n_lo [, counter]).
void ring_seeds() {
  // An honest exchange: write 1000, read 1000, reserve/commit, peek/consume, wrap around.
  write_seed("shm_ring", "honest",
             std::string("\0"
                         "\2\3\xe8"
                         "\3\3\xe8"
                         "\4\x0f\xa0"
                         "\5\x0f\xa0"
                         "\2\x0f\xff"
                         "\3\x0f\xff",
                         19));
  // A peer that moves the head past the tail by more than the capacity.
  write_seed("shm_ring", "hostile-head",
             std::string("\0"
                         "\0\0\0\x80\0\0\1\0\0\0\0\0"
                         "\3\0\x10",
                         16));
}

// --- engine ----------------------------------------------------------------------------

void engine_seeds() {
  engine::Request allreduce;
  allreduce.name = "grad/conv1.weight";
  allreduce.shape = {32, 1, 3, 3};
  allreduce.postscale = 0.5;
  engine::Request broadcast;
  broadcast.name = "params";
  broadcast.op = OpType::kBroadcast;
  broadcast.root = 1;
  broadcast.shape = {128, 10};
  engine::Request alltoall;
  alltoall.name = "tokens";
  alltoall.op = OpType::kAlltoall;
  alltoall.dtype = DataType::kInt64;
  alltoall.shape = {6, 4};
  alltoall.splits = {2, 4};
  std::string message;
  engine::encode_requests({&allreduce, &broadcast, &alltoall}, message);
  write_seed("engine_request", "three", std::string("\2\0", 2) + message);  // world 3, rank 0
  message.clear();
  engine::encode_requests({&allreduce}, message);
  write_seed("engine_request", "one", std::string("\1\1", 2) + message);  // world 2, rank 1
}

// --- parameter servers -------------------------------------------------------------------

ps::PartLayout small_part() {
  ps::ModelLayout layout;
  layout.variables = {{"dense/kernel", 12}, {"dense/bias", 3}};
  layout.shards = ps::round_robin(layout.variables, 1);
  return ps::part_of(layout, 0, 1);
}

std::string floats(size_t n, float v) {
  std::string out;
  for (size_t i = 0; i < n; ++i) byte_order::put_f32(out, v + static_cast<float>(i));
  return out;
}

void ps_send(int fd, ps::wire::Type type, const std::string& meta, const std::string& bulk = {}) {
  ps::wire::send(fd, type, meta, {{bulk.data(), bulk.size()}}, soon(), "seed");
}

std::string state_file(const ps::PartLayout& part, const ps::PsConfig& config) {
  auto model = ps::PsState::new_model(part, config);
  for (size_t i = 0; i < model->shards.size(); ++i) {
    model->shards[i]->values.assign(static_cast<size_t>(part.shards[i].length), 0.5f);
  }
  ps::PsState::size_slots(*model);
  ps::PsState state;
  state.install(std::move(model));
  return state.save();
}

void ps_seeds() {
  using ps::wire::Type;
  const ps::PartLayout part = small_part();
  for (auto kind : {ps::OptimizerConfig::Kind::kSgd, ps::OptimizerConfig::Kind::kAdam}) {
    ps::PsConfig config;
    config.optimizer.kind = kind;
    config.mode =
        kind == ps::OptimizerConfig::Kind::kSgd ? ps::UpdateMode::kSync : ps::UpdateMode::kAsync;
    const std::string name = kind == ps::OptimizerConfig::Kind::kSgd ? "sgd-sync" : "adam";
    const std::string file = state_file(part, config);
    write_seed("ps_state_file", name, file);
    write_seed("ps_server", name, captured([&](int fd) {
                 PayloadWriter meta;
                 ps::put_part(meta, part);
                 ps::put_config(meta, config);
                 const size_t n = static_cast<size_t>(part.elements());
                 ps_send(fd, Type::kCreate, meta.take(), floats(n, 1.0f));
                 ps_send(fd, Type::kLayout, "");
                 ps_send(fd, Type::kPush, PayloadWriter().i64(0).f64(0.1).take(), floats(n, 0.25f));
                 ps_send(fd, Type::kPull, PayloadWriter().i64(0).i64(0).take());
                 ps_send(fd, Type::kStats, "");
                 ps_send(fd, Type::kSave, "");
                 ps_send(fd, Type::kRestore, "", file);
                 ps_send(fd, Type::kShutdown, "");
               }));
  }
}

void coordinator_seeds() {
  namespace proto = ps::coordinator;
  write_seed("coordinator", "worker-side", captured([](int fd) {
               proto::send(fd, proto::Msg::kWelcome,
                           proto::encode_welcome(std::chrono::milliseconds(30000)), soon(), "s");
               proto::send(fd, proto::Msg::kStep, proto::encode_step({7, "train_step", "batch 3"}),
                           soon(), "s");
               proto::send(fd, proto::Msg::kPing, "", soon(), "s");
               proto::send(fd, proto::Msg::kShutdown, "", soon(), "s");
               proto::send(fd, proto::Msg::kReject, proto::encode_text("index taken"), soon(), "s");
             }));
  write_seed("coordinator", "coordinator-side", captured([](int fd) {
               proto::send(fd, proto::Msg::kHello, proto::encode_hello(3), soon(), "s");
               proto::ReplyMsg ok{7, true, "loss 0.25", "", ""};
               proto::send(fd, proto::Msg::kResult, proto::encode_reply(ok), soon(), "s");
               proto::ReplyMsg bad{8, false, "", proto::kKindUnavailable, "ps 1 is gone"};
               proto::send(fd, proto::Msg::kError, proto::encode_reply(bad), soon(), "s");
               proto::send(fd, proto::Msg::kPong, "", soon(), "s");
             }));
}

// --- files -----------------------------------------------------------------------------

void file_seeds(const fs::path& scratch) {
  {
    TFRecordWriter writer((scratch / "records").string());
    writer.write("first record");
    writer.write("");
    writer.write(std::string(300, 'x'));
  }
  write_seed("tfrecord", "three", read_file(scratch / "records"));

  Features features;
  features["image/raw"] = Feature{Feature::kBytes, {std::string("\x01\x02\x03", 3)}, {}, {}};
  features["label"] = Feature{Feature::kInt64, {}, {}, {7, -1, int64_t{1} << 40}};
  features["weights"] = Feature{Feature::kFloat, {}, {0.5f, -2.0f}, {}};
  write_seed("example", "three-kinds", encode_example(features));
  write_seed("tfrecord", "example", frame_tfrecord(encode_example(features)));

  std::string events_path;
  {
    EventWriter writer((scratch / "logs").string());
    writer.add_scalar("loss", 0.75f, 1, 1000.0);
    writer.add_scalar("accuracy", 0.5f, 2, 1001.0);
    events_path = writer.path();
  }
  write_seed("tfevents", "scalars", read_file(events_path));

  ckpt::Manifest manifest;
  manifest.step = 100;
  manifest.files = {{"model.bin", 1048576, ckpt::sha256_hex("model")},
                    {"rng", 16, ckpt::sha256_hex("rng")}};
  write_seed("manifest", "two-files", ckpt::encode_manifest(manifest));
  write_seed("manifest", "empty", ckpt::encode_manifest(ckpt::Manifest{}));
}

// IDX (MNIST): magic 0 0 8 dims, big-endian u32 sizes, then the bytes. No writer in
// chorus (it only reads the datasets), so built here field by field.
void idx_seeds() {
  std::string idx("\0\0\x08\x03", 4);
  for (uint32_t d : {2u, 3u, 3u}) {
    for (int shift = 24; shift >= 0; shift -= 8) idx.push_back(static_cast<char>(d >> shift));
  }
  idx += std::string(18, '\x7f');
  write_seed("idx", "images", idx);
  write_seed("idx", "labels", std::string("\0\0\x08\x01\0\0\0\x03\x01\x02\x03", 11));
}

// As chorusrun's ps_cluster.cc (tf_config_json) and the docs write them.
void text_seeds() {
  write_seed("tf_config", "ps-cluster",
             R"({"cluster": {"chief": ["127.0.0.1:2222"], "worker": ["127.0.0.1:2223", )"
             R"("127.0.0.1:2224"], "ps": ["127.0.0.1:2225"]}, "task": {"type": "worker", )"
             R"("index": 1}})");
  write_seed("tf_config", "workers",
             R"({"cluster": {"worker": ["localhost:12345", "localhost:23456"]}, )"
             R"("task": {"type": "worker", "index": 0}})");
  write_seed("job_env", "chorusrun",
             "CHORUS_RANK=1\nCHORUS_SIZE=4\nCHORUS_LOCAL_RANK=1\nCHORUS_LOCAL_SIZE=2\n"
             "CHORUS_CROSS_RANK=0\nCHORUS_CROSS_SIZE=2\nCHORUS_STORE_ADDR=10.0.0.1:29500\n"
             "CHORUS_SECRET=00112233445566778899aabbccddeeff\nCHORUS_RESTART_COUNT=0\n");
  write_seed("job_env", "torchrun",
             "RANK=3\nWORLD_SIZE=4\nLOCAL_RANK=1\nLOCAL_WORLD_SIZE=2\nGROUP_RANK=1\n"
             "MASTER_ADDR=node1\nMASTER_PORT=29500\nTORCHELASTIC_RESTART_COUNT=2\n"
             "CHORUS_SECRET=s3cret\n");
  write_seed("job_env", "openmpi",
             "OMPI_COMM_WORLD_RANK=0\nOMPI_COMM_WORLD_SIZE=2\nOMPI_COMM_WORLD_LOCAL_RANK=0\n"
             "OMPI_COMM_WORLD_LOCAL_SIZE=2\nMASTER_ADDR=127.0.0.1\nMASTER_PORT=29500\n"
             "CHORUS_SECRET=s3cret\n");
  write_seed("job_env", "slurm",
             "SLURM_PROCID=5\nSLURM_NTASKS=8\nSLURM_LOCALID=1\nSLURM_NODEID=1\nSLURM_NNODES=2\n"
             "SLURM_JOB_ID=77\nSLURM_STEP_ID=0\nSLURM_STEP_NODELIST=node[01-02]\n"
             "SLURM_STEP_TASKS_PER_NODE=4(x2)\nSLURMD_NODENAME=node02\nCHORUS_SECRET=s3cret\n");
  write_seed("job_env", "tf_config",
             "TF_CONFIG={\"cluster\": {\"chief\": [\"h0:1\"], \"worker\": [\"h1:1\"]}, "
             "\"task\": {\"type\": \"chief\", \"index\": 0}}\nCHORUS_SECRET=s3cret\n");
  write_seed("hostfile", "mixed",
             "# two nodes\nnode1 slots=4\nnode2:2\n[::1]:2\n10.0.0.7\nnode1  # again\n");
  write_seed("hostfile", "host-list", "a:2,b,c:4,[fe80::1]:1");
}

}  // namespace
}  // namespace chorus::fuzz

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  if (argc != 2) {
    std::cerr << "usage: fuzz_seeds OUT_DIR\n";
    return 2;
  }
  using namespace chorus::fuzz;
  g_out = argv[1];
  fs::path scratch =
      fs::temp_directory_path() / ("chorus-fuzz-seeds-" + std::to_string(::getpid()));
  fs::create_directories(scratch);
  store_seeds();
  auth_seeds();
  hello_seeds();
  ring_seeds();
  engine_seeds();
  ps_seeds();
  coordinator_seeds();
  file_seeds(scratch);
  idx_seeds();
  text_seeds();
  fs::remove_all(scratch);
  return 0;
}
