// The records of one TFRecord file as a dataset (Dataset::tfrecord opens one per file).
#include "chorus/train/tfrecord.h"

#include "chorus/error.h"
#include "stages.h"

namespace chorus {
namespace data_detail {
namespace {

using ParseFn = std::function<Example(const std::string&)>;

class RecordIter final : public Iter {
 public:
  RecordIter(const std::string& path, ParseFn parse) : reader_(path), parse_(std::move(parse)) {}

  std::optional<Example> next() override {
    if (done_ || !reader_.read(record_)) {
      done_ = true;
      return std::nullopt;
    }
    return parse_(record_);
  }

 private:
  TFRecordReader reader_;
  ParseFn parse_;
  std::string record_;  // reused: records of a file are often the same size
  bool done_ = false;
};

// Opens the file when the iteration reaches it, not when the Dataset is built.
struct RecordFileStage final : StageImpl<RecordFileStage> {
  RecordFileStage(std::string p, ParseFn f)
      : StageImpl(nullptr), path(std::move(p)), parse(std::move(f)) {}
  std::unique_ptr<Iter> make(const Context&) const override {
    return std::make_unique<RecordIter>(path, parse);
  }
  int64_t cardinality() const override { return kUnknownCardinality; }
  std::string describe() const override { return "tfrecord_file(" + path + ")"; }
  std::string path;
  ParseFn parse;
};

}  // namespace

Dataset tfrecord_file(const std::string& path, ParseFn parse) {
  return Access::wrap(std::make_shared<RecordFileStage>(path, std::move(parse)));
}

}  // namespace data_detail
}  // namespace chorus
