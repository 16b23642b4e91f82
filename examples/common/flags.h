// Command-line flags of the examples: "--name value", or "--name" alone for a switch.
// An unknown flag or a missing value prints the usage and exits with status 2.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <string>

namespace chorus::examples {

class Flags {
 public:
  Flags(const char* program, const char* usage) : program_(program), usage_(usage) {}

  Flags& add(const char* name, int& v) {
    return value(name, [&v](const char* s) { v = std::atoi(s); });
  }
  Flags& add(const char* name, int64_t& v) {
    return value(name, [&v](const char* s) { v = std::atoll(s); });
  }
  Flags& add(const char* name, double& v) {
    return value(name, [&v](const char* s) { v = std::atof(s); });
  }
  Flags& add(const char* name, std::string& v) {
    return value(name, [&v](const char* s) { v = s; });
  }
  Flags& add_switch(const char* name, bool& v) {
    switches_[name] = &v;
    return *this;
  }

  void parse(int argc, char** argv) const {
    for (int i = 1; i < argc; ++i) {
      if (auto s = switches_.find(argv[i]); s != switches_.end()) {
        *s->second = true;
      } else if (auto v = values_.find(argv[i]); v != values_.end() && i + 1 < argc) {
        v->second(argv[++i]);
      } else {
        fail(argv[i]);
      }
    }
  }

  [[noreturn]] void fail(const char* bad) const {
    std::fprintf(stderr, "%s: bad argument '%s'\nusage: %s %s\n", program_, bad, program_, usage_);
    std::exit(2);
  }

 private:
  Flags& value(const char* name, std::function<void(const char*)> set) {
    values_[name] = std::move(set);
    return *this;
  }

  const char* program_;
  const char* usage_;
  std::map<std::string, std::function<void(const char*)>> values_;
  std::map<std::string, bool*> switches_;
};

}  // namespace chorus::examples
