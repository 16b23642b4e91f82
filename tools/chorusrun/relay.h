// Relays a rank's stdout/stderr: splits the bytes read from its pipes into lines and writes
// each whole line, prefixed "[rank] ", with a single write() — so lines from different
// ranks never mix mid-line. With an output directory, lines go unprefixed to
// DIR/rank.<r>.log instead (stdout and stderr both).
//
// Thread safety: chorusrun relays from its one supervising thread.
#pragma once

#include <functional>
#include <string>
#include <string_view>

namespace chorus::run {

class LineRelay {
 public:
  // `label` is the prefix's content ("3", or "mpirun"); `out_fd` where lines go (1 or 2),
  // or -1 with `log_path` set to write to that file.
  LineRelay(std::string label, int out_fd, const std::string& log_path = "");
  ~LineRelay();
  LineRelay(const LineRelay&) = delete;
  LineRelay& operator=(const LineRelay&) = delete;

  // Appends bytes and writes out every complete line.
  void feed(const char* data, size_t n);
  // Writes a final unterminated line (with a newline added). Call at end of stream.
  void finish();

  // Called with every complete line (without its newline) before it is written.
  void set_observer(std::function<void(std::string_view)> observer) {
    observer_ = std::move(observer);
  }

  // Longest line kept whole; longer ones are cut into pieces of this size.
  static constexpr size_t kMaxLine = 64 * 1024;

 private:
  void emit(const char* line, size_t n);

  std::string prefix_;
  int fd_;
  bool owns_fd_ = false;
  std::string pending_;
  std::function<void(std::string_view)> observer_;
};

// write() until done, retrying EINTR; errors (a closed terminal) are ignored.
void write_fully(int fd, const char* data, size_t n);

// chorusrun's own message: "chorusrun: MESSAGE" as one line on stderr.
void say(const std::string& message);

}  // namespace chorus::run
