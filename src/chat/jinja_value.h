// The values a Jinja template computes with. They mirror the Python objects Jinja2 would hold:
// Undefined, None, bool, int, float, str, list/tuple, dict (insertion-ordered) and callables,
// and they print exactly as Python's str()/repr() and json.dumps() print them, because chat
// prompts must match what transformers renders byte for byte.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace mls::chat::jinja {

class Value;

// A type or value error inside an operation; the evaluator adds the template position.
class ValueError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Lists and dicts record their nesting (kMaxValueDepth bounds it, so that printing, comparing
// and freeing never recurse without bound) and whether a namespace is inside: a namespace may not
// hold another, which keeps the only mutable values free of cycles.
struct ListData {
  std::vector<Value> items;
  bool tuple = false;  // prints as (a, b)
  int depth = 1;
  bool holds_namespace = false;
};

struct DictData {
  std::vector<std::pair<std::string, Value>> items;
  bool is_namespace = false;  // a namespace() object: the only mutable mapping in templates
  int depth = 1;
  bool holds_namespace = false;

  const Value* find(std::string_view key) const;
  // Throws ValueError when `v` would nest too deep or put a namespace inside a namespace.
  void set(std::string key, Value v);
};

struct CallArgs {
  std::vector<Value> args;
  std::vector<std::pair<std::string, Value>> kwargs;

  // Argument `pos` or keyword `name`, or nullopt; used to emulate Python signatures.
  std::optional<Value> get(size_t pos, std::string_view name) const;
  // Keyword argument `name` only.
  std::optional<Value> kwarg(std::string_view name) const;
};

using Function = std::function<Value(const CallArgs&)>;

struct Undefined {
  std::string name;  // what was looked up, for error messages
};
struct None {};

class Value {
 public:
  Value() : v_(Undefined{}) {}
  Value(None) : v_(None{}) {}
  Value(Undefined u) : v_(std::move(u)) {}
  Value(bool b) : v_(b) {}
  Value(int v) : v_(static_cast<int64_t>(v)) {}
  Value(int64_t v) : v_(v) {}
  Value(double v) : v_(v) {}
  Value(std::string s) : v_(std::move(s)) {}
  Value(const char* s) : v_(std::string(s)) {}
  Value(std::shared_ptr<ListData> l) : v_(std::move(l)) {}
  Value(std::shared_ptr<DictData> d) : v_(std::move(d)) {}
  Value(std::shared_ptr<Function> f) : v_(std::move(f)) {}

  static Value list(std::vector<Value> items, bool tuple = false);
  static Value dict(std::vector<std::pair<std::string, Value>> items = {});
  static Value function(Function f);
  // Throws ValueError when `j` nests deeper than kMaxValueDepth.
  static Value from_json(const nlohmann::ordered_json& j);

  bool is_undefined() const { return std::holds_alternative<Undefined>(v_); }
  bool is_none() const { return std::holds_alternative<None>(v_); }
  bool is_bool() const { return std::holds_alternative<bool>(v_); }
  bool is_int() const { return std::holds_alternative<int64_t>(v_); }
  bool is_float() const { return std::holds_alternative<double>(v_); }
  bool is_number() const { return is_int() || is_float() || is_bool(); }
  bool is_string() const { return std::holds_alternative<std::string>(v_); }
  bool is_list() const { return std::holds_alternative<std::shared_ptr<ListData>>(v_); }
  bool is_dict() const { return std::holds_alternative<std::shared_ptr<DictData>>(v_); }
  bool is_callable() const { return std::holds_alternative<std::shared_ptr<Function>>(v_); }

  bool as_bool() const { return std::get<bool>(v_); }
  int64_t as_int() const { return std::get<int64_t>(v_); }
  double as_float() const { return std::get<double>(v_); }
  // Numeric value of an int, float or bool.
  double to_double() const;
  const std::string& as_string() const { return std::get<std::string>(v_); }
  const std::vector<Value>& items() const { return std::get<std::shared_ptr<ListData>>(v_)->items; }
  const ListData& as_list() const { return *std::get<std::shared_ptr<ListData>>(v_); }
  DictData& as_dict() const { return *std::get<std::shared_ptr<DictData>>(v_); }
  const Function& as_function() const { return *std::get<std::shared_ptr<Function>>(v_); }
  const std::string& undefined_name() const { return std::get<Undefined>(v_).name; }

  // Python truthiness.
  bool truthy() const;
  // Python type name ("str", "dict", ...) for error messages.
  std::string type_name() const;

  // Jinja output conversion: str(value), with Undefined printing as "".
  std::string str() const;
  // Python repr().
  std::string repr() const;
  // Elements when iterated: list items, dict keys, string characters; Undefined is empty.
  std::vector<Value> iterate() const;
  // len(); throws ValueError for values without a length.
  int64_t length() const;
  // List/dict nesting: 0 for scalars.
  int depth() const;
  // A namespace, or a list/dict with one inside.
  bool holds_namespace() const;

 private:
  std::variant<Undefined, None, bool, int64_t, double, std::string, std::shared_ptr<ListData>,
               std::shared_ptr<DictData>, std::shared_ptr<Function>>
      v_;
};

// Python ==, <.
bool equals(const Value& a, const Value& b);
bool less_than(const Value& a, const Value& b);

// Python repr() of a float ("1.0", "1e-05", "inf").
std::string format_float(double d);

struct JsonOptions {
  bool ensure_ascii = false;
  std::optional<std::string> indent;  // per-level indent text; nullopt = single line
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool sort_keys = false;
};
// json.dumps(value, ...) as Python writes it.
std::string to_json(const Value& v, const JsonOptions& options);

}  // namespace mls::chat::jinja
