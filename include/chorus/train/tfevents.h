// TensorBoard event files: what `tensorboard --logdir` reads.
//
// A file `<log_dir>/events.out.tfevents.<unix seconds>.<hostname>.<pid>[.<n>]` holds a
// TFRecord stream (chorus/train/tfrecord.h) of serialized tensorflow.Event protos. The
// first is Event{wall_time = 1, file_version = 3: "brain.Event:2"}; each scalar is
// Event{wall_time = 1 (double), step = 2 (int64), summary = 5: Summary{value = 1:
// Value{tag = 1 (string), simple_value = 2 (float)}}}. Fields are encoded as protobuf
// does (proto3: zero step, zero wall_time and empty tag are omitted), so the bytes equal
// TensorFlow's for the same event. The format is described in docs/train_io.md.
//
// Errors: IoError (the directory or file cannot be created or written), InvalidArgument
// (a corrupt file while reading; the message names the file and byte offset).
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "chorus/train/tfrecord.h"

namespace chorus {

// Thread safety: every method may be called from any thread (one mutex).
class EventWriter {
 public:
  // Creates `log_dir` (with parents) and a new event file in it, and writes and flushes
  // the file_version event. A second writer in the same process gets a ".<n>" suffix.
  explicit EventWriter(const std::string& log_dir);
  ~EventWriter();  // flush + close, errors logged

  EventWriter(const EventWriter&) = delete;
  EventWriter& operator=(const EventWriter&) = delete;

  // Appends one scalar, stamped with the current time or `wall_time` (seconds since the
  // Unix epoch). Buffered: TensorBoard sees it after flush() or destruction.
  void add_scalar(const std::string& tag, float value, int64_t step);
  void add_scalar(const std::string& tag, float value, int64_t step, double wall_time);
  void flush();
  const std::string& path() const { return path_; }

 private:
  std::mutex mu_;
  std::string path_;
  TFRecordWriter writer_;  // guarded by mu_
};

struct ScalarEvent {
  std::string tag;
  float value = 0;
  int64_t step = 0;
  double wall_time = 0;
};

// Every scalar of an event file, in file order: TF1-style Summary.Value{simple_value = 2}
// (what EventWriter writes), and TF2-style (tf.summary.scalar in TensorFlow 2):
// Value{tensor = 8: TensorProto{dtype = 1: DT_FLOAT (1) or DT_DOUBLE (2), one value in
// float_val = 5 / double_val = 6 (packed or not) or in tensor_content = 4}} whose
// metadata = 9: SummaryMetadata{plugin_data = 1: {plugin_name = 1: "scalars"}}, or without
// metadata when an earlier value of the same tag in the file had it (TensorFlow may send
// a tag's metadata once). A double is narrowed to float. Events of other kinds (graphs,
// images, histograms, tensors of other plugins, dtypes or sizes) and unknown fields are
// skipped.
std::vector<ScalarEvent> read_scalars(const std::string& path);

// The file_version of the file's first event ("brain.Event:2"), or "" when that event
// has none. InvalidArgument when the file holds no record.
std::string read_file_version(const std::string& path);

}  // namespace chorus
