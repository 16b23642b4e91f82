// TF_CONFIG (tf.distribute's cluster description) and the small strict JSON reader it
// needs: {"cluster": {"chief": ["h:p"], "worker": [...], "ps": [...]},
//         "task": {"type": "worker", "index": 0}}.
// Header-only so that it builds with the rendezvous library as it is; used by job_env.cc.
// Errors: InvalidArgument starting with "TF_CONFIG:" and naming what is wrong.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "chorus/error.h"

namespace chorus::tf_config {

// A JSON value. Numbers keep their text; TF_CONFIG only needs small integers.
struct Json {
  enum class Kind { kNull, kBool, kNumber, kString, kArray, kObject };
  Kind kind = Kind::kNull;
  bool boolean = false;
  std::string text;  // string contents, or a number's digits
  std::vector<Json> items;
  std::vector<std::pair<std::string, Json>> members;

  const Json* find(const std::string& key) const {
    for (const auto& m : members) {
      if (m.first == key) return &m.second;
    }
    return nullptr;
  }
};

// Strict RFC 8259: no comments, no trailing commas, no duplicate keys, nothing after the
// value; nesting is capped so hostile input cannot exhaust the stack.
class JsonReader {
 public:
  explicit JsonReader(const std::string& text) : s_(text) {}

  Json read_document() {
    Json v = value(0);
    skip_space();
    if (pos_ != s_.size()) fail("unexpected text after the JSON value");
    return v;
  }

 private:
  static constexpr int kMaxDepth = 32;

  [[noreturn]] void fail(const std::string& what) const {
    CHORUS_THROW(InvalidArgument, "TF_CONFIG: malformed JSON at offset ", pos_, ": ", what);
  }
  void skip_space() {
    while (pos_ < s_.size() &&
           (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r')) {
      ++pos_;
    }
  }
  bool consume(char c) {
    skip_space();
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  void expect(char c) {
    if (!consume(c)) fail(std::string("expected '") + c + "'");
  }
  bool literal(const char* word) {
    size_t n = std::char_traits<char>::length(word);
    if (s_.compare(pos_, n, word) != 0) return false;
    pos_ += n;
    return true;
  }

  Json value(int depth) {
    if (depth > kMaxDepth) fail("nested too deeply");
    skip_space();
    if (pos_ >= s_.size()) fail("unexpected end of input");
    Json v;
    char c = s_[pos_];
    if (c == '{') return object(depth);
    if (c == '[') return array(depth);
    if (c == '"') {
      v.kind = Json::Kind::kString;
      v.text = string();
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      v.kind = Json::Kind::kNumber;
      v.text = number();
    } else if (literal("true")) {
      v.kind = Json::Kind::kBool;
      v.boolean = true;
    } else if (literal("false")) {
      v.kind = Json::Kind::kBool;
    } else if (literal("null")) {
      v.kind = Json::Kind::kNull;
    } else {
      fail(std::string("unexpected character '") + c + "'");
    }
    return v;
  }

  Json object(int depth) {
    Json v;
    v.kind = Json::Kind::kObject;
    expect('{');
    if (consume('}')) return v;
    do {
      skip_space();
      if (pos_ >= s_.size() || s_[pos_] != '"') fail("expected a string key");
      std::string key = string();
      if (v.find(key)) fail("duplicate key '" + key + "'");
      expect(':');
      v.members.emplace_back(std::move(key), value(depth + 1));
    } while (consume(','));
    expect('}');
    return v;
  }

  Json array(int depth) {
    Json v;
    v.kind = Json::Kind::kArray;
    expect('[');
    if (consume(']')) return v;
    do {
      v.items.push_back(value(depth + 1));
    } while (consume(','));
    expect(']');
    return v;
  }

  std::string number() {
    size_t start = pos_;
    if (s_[pos_] == '-') ++pos_;
    size_t digits = pos_;
    while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_;
    if (pos_ == digits) fail("malformed number");
    if (s_[digits] == '0' && pos_ - digits > 1) fail("number with a leading zero");
    if (pos_ < s_.size() && (s_[pos_] == '.' || s_[pos_] == 'e' || s_[pos_] == 'E')) {
      fail("only integers are expected in TF_CONFIG");
    }
    return s_.substr(start, pos_ - start);
  }

  void append_utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  uint32_t hex4() {
    if (pos_ + 4 > s_.size()) fail("truncated \\u escape");
    uint32_t cp = 0;
    for (int i = 0; i < 4; ++i) {
      char h = s_[pos_++];
      int d = (h >= '0' && h <= '9')   ? h - '0'
              : (h >= 'a' && h <= 'f') ? h - 'a' + 10
              : (h >= 'A' && h <= 'F') ? h - 'A' + 10
                                       : -1;
      if (d < 0) fail("bad hex digit in \\u escape");
      cp = cp * 16 + static_cast<uint32_t>(d);
    }
    return cp;
  }

  std::string string() {
    ++pos_;  // opening quote
    std::string out;
    for (;;) {
      if (pos_ >= s_.size()) fail("unterminated string");
      char c = s_[pos_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) fail("control character in string");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= s_.size()) fail("unterminated string");
      char e = s_[pos_++];
      const char* simple = "\"\\/bfnrt";
      const char* mapped = "\"\\/\b\f\n\r\t";
      const char* hit = std::char_traits<char>::find(simple, 8, e);
      if (hit) {
        out += mapped[hit - simple];
      } else if (e == 'u') {
        uint32_t cp = hex4();
        if (cp >= 0xD800 && cp <= 0xDFFF) fail("surrogate escapes are not supported");
        append_utf8(out, cp);
      } else {
        fail(std::string("bad escape '\\") + e + "'");
      }
    }
  }

  const std::string& s_;
  size_t pos_ = 0;
};

struct Config {
  std::map<std::string, std::vector<std::string>> cluster;  // role -> "host:port" list
  std::string task_type;
  int task_index = 0;
};

inline int small_int(const Json& v, const char* what) {
  CHORUS_CHECK_ARG(v.kind == Json::Kind::kNumber && v.text[0] != '-' && v.text.size() <= 6,
                   "TF_CONFIG: ", what, " must be a non-negative integer");
  return std::stoi(v.text);
}

inline std::vector<std::string> address_list(const Json& v, const std::string& role) {
  CHORUS_CHECK_ARG(v.kind == Json::Kind::kArray, "TF_CONFIG: cluster.", role,
                   " must be a list of \"host:port\" strings");
  std::vector<std::string> out;
  for (const Json& item : v.items) {
    CHORUS_CHECK_ARG(item.kind == Json::Kind::kString && !item.text.empty(), "TF_CONFIG: cluster.",
                     role, " must be a list of \"host:port\" strings");
    out.push_back(item.text);
  }
  return out;
}

// Parses and checks TF_CONFIG: task.type must name a role of the cluster (or "evaluator")
// and task.index must be inside that role's list; at most one chief.
inline Config parse(const std::string& text) {
  Json root = JsonReader(text).read_document();
  CHORUS_CHECK_ARG(root.kind == Json::Kind::kObject, "TF_CONFIG: must be a JSON object");
  const Json* cluster = root.find("cluster");
  const Json* task = root.find("task");
  CHORUS_CHECK_ARG(cluster && cluster->kind == Json::Kind::kObject,
                   "TF_CONFIG: 'cluster' must be an object");
  CHORUS_CHECK_ARG(task && task->kind == Json::Kind::kObject,
                   "TF_CONFIG: 'task' must be an object");
  Config config;
  for (const auto& [role, list] : cluster->members) {
    CHORUS_CHECK_ARG(role == "chief" || role == "worker" || role == "ps" || role == "evaluator",
                     "TF_CONFIG: unknown role '", role, "' in cluster");
    config.cluster[role] = address_list(list, role);
  }
  CHORUS_CHECK_ARG(config.cluster["chief"].size() <= 1, "TF_CONFIG: more than one chief");
  if (config.cluster["chief"].empty()) config.cluster.erase("chief");
  const Json* type = task->find("type");
  CHORUS_CHECK_ARG(type && type->kind == Json::Kind::kString,
                   "TF_CONFIG: task.type must be a string");
  config.task_type = type->text;
  const Json* index = task->find("index");
  config.task_index = index ? small_int(*index, "task.index") : 0;
  if (config.task_type == "evaluator") return config;
  auto it = config.cluster.find(config.task_type);
  CHORUS_CHECK_ARG(it != config.cluster.end(), "TF_CONFIG: task.type '", config.task_type,
                   "' is not a role of the cluster");
  CHORUS_CHECK_ARG(config.task_index < static_cast<int>(it->second.size()),
                   "TF_CONFIG: task.index ", config.task_index, " is not below the number of ",
                   config.task_type, " tasks (", it->second.size(), ")");
  return config;
}

}  // namespace chorus::tf_config
