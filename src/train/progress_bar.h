// Keras' progress bar for the chief's console:
//    37/469 [==>...........................] - ETA: 12s - loss: 0.5321 - accuracy: 0.8123
//   469/469 [==============================] - 6s 13ms/step - loss: 0.4410 - accuracy: 0.8456
// On a terminal one line is redrawn (at most 10 times a second); otherwise (a log file,
// chorusrun's piped output) a line is printed at every tenth of the epoch.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <map>
#include <string>

namespace chorus {

class ProgressBar {
 public:
  // total: steps in the epoch, -1 when unknown.
  ProgressBar(int64_t total, std::FILE* out, bool interactive);
  void update(int64_t done, const std::map<std::string, double>& logs);
  // The epoch's last line, with its duration and time per step.
  void finish(int64_t done, const std::map<std::string, double>& logs);

  // Parts, for tests.
  static std::string bar(int64_t done, int64_t total, int width = 30);
  static std::string metrics(const std::map<std::string, double>& logs);
  static std::string duration(double seconds);

 private:
  double elapsed() const;
  void emit(const std::string& line, bool final);

  int64_t total_;
  std::FILE* out_;
  bool interactive_;
  std::chrono::steady_clock::time_point start_;
  double last_draw_ = -1;
  int64_t last_tenth_ = 0;
};

}  // namespace chorus
