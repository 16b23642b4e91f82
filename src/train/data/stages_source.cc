// Source stages: empty, from_tensor_slices, range, file lists (src/train/data/stages.h).
#include <ATen/ops/scalar_tensor.h>

#include <sstream>

#include "chorus/error.h"
#include "stages.h"

namespace chorus {
namespace data_detail {

uint64_t mix_seed(uint64_t a, uint64_t b) {
  uint64_t z = a + 0x9E3779B97F4A7C15ull * (b + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

namespace {

class EmptyIter final : public Iter {
 public:
  std::optional<Example> next() override { return std::nullopt; }
};

class SlicesIter final : public Iter {
 public:
  SlicesIter(std::vector<at::Tensor> tensors, int64_t size)
      : tensors_(std::move(tensors)), size_(size) {}

  std::optional<Example> next() override {
    if (next_ >= size_) return std::nullopt;
    Example e;
    e.reserve(tensors_.size());
    for (const at::Tensor& t : tensors_) e.push_back(t.select(0, next_));
    ++next_;
    return e;
  }

 private:
  std::vector<at::Tensor> tensors_;
  int64_t size_;
  int64_t next_ = 0;
};

class RangeIter final : public Iter {
 public:
  explicit RangeIter(int64_t size) : size_(size) {}

  std::optional<Example> next() override {
    if (next_ >= size_) return std::nullopt;
    return Example{at::scalar_tensor(next_++, at::kLong)};
  }

 private:
  int64_t size_;
  int64_t next_ = 0;
};

// Opens each file when the previous one is exhausted; the file's dataset runs in the same
// context, so shuffles inside it follow the epoch and repetition too.
class FilesIter final : public Iter {
 public:
  FilesIter(std::vector<std::string> files, FilesStage::OpenFn open, Context ctx)
      : files_(std::move(files)), open_(std::move(open)), ctx_(ctx) {}

  std::optional<Example> next() override {
    while (true) {
      if (current_) {
        if (auto e = current_->next()) return e;
        current_.reset();
      }
      if (next_file_ >= files_.size()) return std::nullopt;
      open_next();
    }
  }

 private:
  void open_next() {
    const std::string& file = files_[next_file_++];
    Dataset ds = open_(file);
    current_ = Access::stage(ds)->make(ctx_);
  }

  std::vector<std::string> files_;
  FilesStage::OpenFn open_;
  Context ctx_;
  size_t next_file_ = 0;
  std::unique_ptr<Iter> current_;
};

std::string shape_of(const at::Tensor& t) {
  std::ostringstream out;
  out << t.sizes();
  return out.str();
}

}  // namespace

std::unique_ptr<Iter> EmptyStage::make(const Context&) const {
  return std::make_unique<EmptyIter>();
}

SlicesStage::SlicesStage(std::vector<at::Tensor> t)
    : StageImpl(nullptr), tensors(std::move(t)), size(0) {
  CHORUS_CHECK_ARG(!tensors.empty(), "from_tensor_slices: no tensors");
  for (size_t i = 0; i < tensors.size(); ++i) {
    CHORUS_CHECK_ARG(tensors[i].defined(), "from_tensor_slices: tensor ", i, " is undefined");
    CHORUS_CHECK_ARG(tensors[i].dim() >= 1, "from_tensor_slices: tensor ", i,
                     " is a scalar; every tensor needs a dimension 0 to slice");
    CHORUS_CHECK_ARG(tensors[i].size(0) == tensors[0].size(0), "from_tensor_slices: tensor ", i,
                     " has shape ", shape_of(tensors[i]), " but tensor 0 has ",
                     shape_of(tensors[0]), "; size(0) must match");
  }
  size = tensors[0].size(0);
}

std::unique_ptr<Iter> SlicesStage::make(const Context&) const {
  return std::make_unique<SlicesIter>(tensors, size);
}

std::string SlicesStage::describe() const {
  return "from_tensor_slices(" + std::to_string(size) + ")";
}

std::unique_ptr<Iter> RangeStage::make(const Context&) const {
  return std::make_unique<RangeIter>(size);
}

std::string RangeStage::describe() const { return "range(" + std::to_string(size) + ")"; }

FilesStage::FilesStage(std::string n, std::vector<std::string> f, OpenFn o)
    : StageImpl(nullptr), name(std::move(n)), files(std::move(f)), open(std::move(o)) {
  CHORUS_CHECK_ARG(open, name, ": no function to open a file");
}

std::unique_ptr<Iter> FilesStage::make(const Context& ctx) const {
  return std::make_unique<FilesIter>(files, open, ctx);
}

std::string FilesStage::describe() const {
  return name + "(" + std::to_string(files.size()) + (files.size() == 1 ? " file)" : " files)");
}

}  // namespace data_detail
}  // namespace chorus
