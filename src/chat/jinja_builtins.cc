#include "chat/jinja_builtins.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <ctime>
#include <limits>
#include <unordered_map>

#include "chat/jinja_limits.h"
#include "tokenizer/utf8.h"

namespace mls::chat::jinja {
namespace {

using tok::u32_to_utf8;
using tok::utf8_to_u32;

[[noreturn]] void type_error(std::string msg) {
  throw ValueError(std::move(msg));
}

bool int_like(const Value& v) {
  return v.is_int() || v.is_bool();
}
int64_t to_int(const Value& v) {
  return v.is_bool() ? v.as_bool() : v.as_int();
}

// Python ints do not overflow; ours are 64-bit, and leaving their range is an error.
[[noreturn]] void overflow() {
  type_error("integer result out of the 64-bit range");
}
int64_t add(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) overflow();
  return r;
}
int64_t sub(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_sub_overflow(a, b, &r)) overflow();
  return r;
}
int64_t mul(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) overflow();
  return r;
}
// int(float): Python raises on inf and nan; out of our range is an error too.
int64_t float_to_int(double d) {
  if (!(d > -9.3e18 && d < 9.3e18)) type_error("cannot convert float to a 64-bit integer");
  return static_cast<int64_t>(d);
}

// Sizes a template asks for (repetition, padding) are checked before anything is allocated.
void check_string_size(size_t bytes) {
  if (bytes > kMaxStringBytes)
    type_error(fmt::format("a string of more than {} bytes", kMaxStringBytes));
}
size_t checked_width(int64_t n) {
  const size_t w = n < 0 ? 0 : static_cast<size_t>(n);
  check_string_size(w);
  return w;
}

// Python's str.isspace() for the characters text contains.
bool is_space(char32_t c) {
  return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1C && c <= 0x1F) || c == 0x85 ||
         c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
         c == 0x202F || c == 0x205F || c == 0x3000;
}

char32_t upper(char32_t c) {
  return c >= 'a' && c <= 'z' ? c - 32 : c;
}
char32_t lower(char32_t c) {
  return c >= 'A' && c <= 'Z' ? c + 32 : c;
}
bool is_alpha(char32_t c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c >= 0x80;
}

std::string map_chars(const std::string& s, char32_t (*f)(char32_t)) {
  std::u32string u = utf8_to_u32(s);
  for (auto& c : u) c = f(c);
  return u32_to_utf8(u);
}

std::string capitalize(const std::string& s) {
  std::u32string u = utf8_to_u32(s);
  for (size_t i = 0; i < u.size(); ++i) u[i] = i == 0 ? upper(u[i]) : lower(u[i]);
  return u32_to_utf8(u);
}

// str.title(): a letter after a non-letter starts a word.
std::string py_title(const std::string& s) {
  std::u32string u = utf8_to_u32(s);
  bool prev_alpha = false;
  for (auto& c : u) {
    c = prev_alpha ? lower(c) : upper(c);
    prev_alpha = is_alpha(c);
  }
  return u32_to_utf8(u);
}

// Jinja's title filter: words start after white space or one of "-({[<".
std::string jinja_title(const std::string& s) {
  std::u32string u = utf8_to_u32(s);
  bool start = true;
  for (auto& c : u) {
    const bool sep = is_space(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
    c = sep ? c : start ? upper(c) : lower(c);
    start = sep;
  }
  return u32_to_utf8(u);
}

std::string strip(const std::string& s, const Value& chars, bool left, bool right) {
  const std::u32string u = utf8_to_u32(s);
  std::u32string set;
  const bool custom = chars.is_string();
  if (custom) set = utf8_to_u32(chars.as_string());
  const auto drop = [&](char32_t c) {
    return custom ? set.find(c) != std::u32string::npos : is_space(c);
  };
  size_t b = 0, e = u.size();
  if (left)
    while (b < e && drop(u[b])) ++b;
  if (right)
    while (e > b && drop(u[e - 1])) --e;
  return u32_to_utf8(u.substr(b, e - b));
}

Value split(const std::string& s, const Value& sep, const Value& maxsplit_v) {
  int64_t maxsplit = maxsplit_v.is_int() ? maxsplit_v.as_int() : -1;
  std::vector<Value> parts;
  if (!sep.is_string()) {  // runs of white space, no empty parts
    const std::u32string u = utf8_to_u32(s);
    size_t i = 0;
    while (true) {
      while (i < u.size() && is_space(u[i])) ++i;
      if (i >= u.size()) break;
      if (maxsplit == 0) {
        size_t e = u.size();
        while (e > i && is_space(u[e - 1])) --e;
        parts.emplace_back(u32_to_utf8(u.substr(i, e - i)));
        break;
      }
      size_t j = i;
      while (j < u.size() && !is_space(u[j])) ++j;
      parts.emplace_back(u32_to_utf8(u.substr(i, j - i)));
      if (maxsplit > 0) --maxsplit;
      i = j;
    }
    return Value::list(std::move(parts));
  }
  const std::string& d = sep.as_string();
  if (d.empty()) type_error("empty separator");
  size_t start = 0;
  while (maxsplit != 0) {
    const size_t p = s.find(d, start);
    if (p == std::string::npos) break;
    parts.emplace_back(s.substr(start, p - start));
    start = p + d.size();
    if (maxsplit > 0) --maxsplit;
  }
  parts.emplace_back(s.substr(start));
  return Value::list(std::move(parts));
}

std::string replace(const std::string& s, const std::string& old, const std::string& repl,
                    int64_t count) {
  std::string out;
  if (old.empty()) {  // Python inserts the replacement between every character
    const std::u32string u = utf8_to_u32(s);
    for (size_t i = 0; i <= u.size(); ++i) {
      if (count < 0 || static_cast<int64_t>(i) < count) out += repl;
      if (i < u.size()) out += u32_to_utf8(u.substr(i, 1));
      check_string_size(out.size());
    }
    return out;
  }
  size_t start = 0;
  for (int64_t n = 0; count < 0 || n < count; ++n) {
    const size_t p = s.find(old, start);
    if (p == std::string::npos) break;
    out.append(s, start, p - start).append(repl);
    check_string_size(out.size());
    start = p + old.size();
  }
  return out.append(s, start, std::string::npos);
}

bool affix(const std::string& s, const Value& arg, bool prefix) {
  const auto one = [&](const Value& a) {
    if (!a.is_string()) type_error("startswith/endswith argument must be str or a tuple of str");
    const std::string& p = a.as_string();
    if (p.size() > s.size()) return false;
    return prefix ? s.compare(0, p.size(), p) == 0
                  : s.compare(s.size() - p.size(), p.size(), p) == 0;
  };
  if (arg.is_list()) {
    for (const auto& a : arg.items())
      if (one(a)) return true;
    return false;
  }
  return one(arg);
}

Value arg_or(const CallArgs& a, size_t pos, std::string_view name, Value fallback = Value()) {
  auto v = a.get(pos, name);
  return v ? *v : fallback;
}

// Code-point index of a byte offset, for str.find.
int64_t cp_index(const std::string& s, size_t byte_pos) {
  return static_cast<int64_t>(utf8_to_u32(std::string_view(s).substr(0, byte_pos)).size());
}

Value string_method(const std::string& s, const std::string& name) {
  static const std::unordered_map<std::string,
                                  std::function<Value(const std::string&, const CallArgs&)>>
      methods = {
          {"split",
           [](const std::string& s, const CallArgs& a) {
             return split(s, arg_or(a, 0, "sep"), arg_or(a, 1, "maxsplit"));
           }},
          {"strip",
           [](const std::string& s, const CallArgs& a) {
             return Value(strip(s, arg_or(a, 0, "chars"), true, true));
           }},
          {"lstrip",
           [](const std::string& s, const CallArgs& a) {
             return Value(strip(s, arg_or(a, 0, "chars"), true, false));
           }},
          {"rstrip",
           [](const std::string& s, const CallArgs& a) {
             return Value(strip(s, arg_or(a, 0, "chars"), false, true));
           }},
          {"startswith",
           [](const std::string& s, const CallArgs& a) {
             return Value(affix(s, arg_or(a, 0, "prefix"), true));
           }},
          {"endswith",
           [](const std::string& s, const CallArgs& a) {
             return Value(affix(s, arg_or(a, 0, "suffix"), false));
           }},
          {"upper",
           [](const std::string& s, const CallArgs&) { return Value(map_chars(s, upper)); }},
          {"lower",
           [](const std::string& s, const CallArgs&) { return Value(map_chars(s, lower)); }},
          {"title", [](const std::string& s, const CallArgs&) { return Value(py_title(s)); }},
          {"capitalize",
           [](const std::string& s, const CallArgs&) { return Value(capitalize(s)); }},
          {"replace",
           [](const std::string& s, const CallArgs& a) {
             const Value o = arg_or(a, 0, "old"), n = arg_or(a, 1, "new"),
                         c = arg_or(a, 2, "count");
             if (!o.is_string() || !n.is_string()) type_error("replace() arguments must be str");
             return Value(replace(s, o.as_string(), n.as_string(), c.is_int() ? c.as_int() : -1));
           }},
          {"find",
           [](const std::string& s, const CallArgs& a) {
             const Value sub = arg_or(a, 0, "sub");
             if (!sub.is_string()) type_error("find() argument must be str");
             const size_t p = s.find(sub.as_string());
             return Value(p == std::string::npos ? int64_t{-1} : cp_index(s, p));
           }},
          {"count",
           [](const std::string& s, const CallArgs& a) {
             const Value sub = arg_or(a, 0, "sub");
             if (!sub.is_string()) type_error("count() argument must be str");
             if (sub.as_string().empty())
               return Value(static_cast<int64_t>(utf8_to_u32(s).size()) + 1);
             int64_t n = 0;
             for (size_t p = s.find(sub.as_string()); p != std::string::npos;
                  p = s.find(sub.as_string(), p + sub.as_string().size()))
               ++n;
             return Value(n);
           }},
          {"join",
           [](const std::string& s, const CallArgs& a) {
             std::string out;
             bool first = true;
             for (const auto& v : arg_or(a, 0, "iterable").iterate()) {
               if (!v.is_string())
                 type_error(
                     fmt::format("sequence item: expected str instance, {} found", v.type_name()));
               if (!first) out += s;
               first = false;
               out += v.as_string();
               check_string_size(out.size());
             }
             return Value(out);
           }},
      };
  auto it = methods.find(name);
  if (it == methods.end()) return Value(Undefined{"str." + name});
  const auto& m = it->second;
  return Value::function([s, &m](const CallArgs& a) { return m(s, a); });
}

Value dict_method(const Value& d, const std::string& name) {
  if (name == "items")
    return Value::function([d](const CallArgs&) {
      std::vector<Value> out;
      for (const auto& [k, v] : d.as_dict().items) out.push_back(Value::list({Value(k), v}, true));
      return Value::list(std::move(out));
    });
  if (name == "keys")
    return Value::function([d](const CallArgs&) { return Value::list(d.iterate()); });
  if (name == "values")
    return Value::function([d](const CallArgs&) {
      std::vector<Value> out;
      for (const auto& [k, v] : d.as_dict().items) out.push_back(v);
      return Value::list(std::move(out));
    });
  if (name == "get")
    return Value::function([d](const CallArgs& a) {
      const Value key = arg_or(a, 0, "key");
      const Value* v = key.is_string() ? d.as_dict().find(key.as_string()) : nullptr;
      return v ? *v : arg_or(a, 1, "default", Value(None{}));
    });
  return Value();
}

}  // namespace

Value binary_op(std::string_view op, const Value& a, const Value& b) {
  if (op == "~") {
    std::string l = a.str(), r = b.str();
    check_string_size(l.size() + r.size());
    return Value(l + r);
  }
  if (a.is_undefined() || b.is_undefined())
    type_error(fmt::format("'{}' is undefined",
                           a.is_undefined() ? a.undefined_name() : b.undefined_name()));
  const bool ints = int_like(a) && int_like(b);
  const bool nums = a.is_number() && b.is_number();
  const auto bad = [&]() -> Value {
    type_error(fmt::format("unsupported operand type(s) for {}: '{}' and '{}'", op, a.type_name(),
                           b.type_name()));
  };
  if (op == "+") {
    if (ints) return Value(add(to_int(a), to_int(b)));
    if (nums) return Value(a.to_double() + b.to_double());
    if (a.is_string() && b.is_string()) {
      check_string_size(a.as_string().size() + b.as_string().size());
      return Value(a.as_string() + b.as_string());
    }
    if (a.is_list() && b.is_list()) {
      std::vector<Value> out = a.items();
      out.insert(out.end(), b.items().begin(), b.items().end());
      return Value::list(std::move(out), a.as_list().tuple && b.as_list().tuple);
    }
    return bad();
  }
  if (op == "-") {
    if (ints) return Value(sub(to_int(a), to_int(b)));
    if (nums) return Value(a.to_double() - b.to_double());
    return bad();
  }
  if (op == "*") {
    if (ints) return Value(mul(to_int(a), to_int(b)));
    if (nums) return Value(a.to_double() * b.to_double());
    const Value& seq = int_like(a) ? b : a;
    const Value& n = int_like(a) ? a : b;
    if (!int_like(n)) return bad();
    const auto times = static_cast<size_t>(std::max<int64_t>(to_int(n), 0));
    if (seq.is_string()) {
      const size_t len = seq.as_string().size();
      if (len > 0 && times > kMaxStringBytes / len) check_string_size(kMaxStringBytes + 1);
      const size_t total = len * times;
      std::string out;
      out.reserve(total);
      if (times > 0) out = seq.as_string();
      // By doubling: log2(times) appends rather than one per repetition.
      while (out.size() < total) out.append(out, 0, std::min(out.size(), total - out.size()));
      return Value(std::move(out));
    }
    if (seq.is_list()) {
      const size_t len = seq.items().size();
      if (len > 0 && times > kMaxListItems / len)
        type_error(fmt::format("a list of more than {} items", kMaxListItems));
      std::vector<Value> out;
      for (size_t i = 0; i < times; ++i)
        out.insert(out.end(), seq.items().begin(), seq.items().end());
      return Value::list(std::move(out));
    }
    return bad();
  }
  if (!nums) return bad();
  if (op == "/") {
    if (b.to_double() == 0) type_error("division by zero");
    return Value(a.to_double() / b.to_double());
  }
  if (op == "//" || op == "%") {
    if (b.to_double() == 0)
      type_error(op == "%" ? "modulo by zero" : "integer division or modulo by zero");
    if (ints) {
      const int64_t x = to_int(a), y = to_int(b);
      if (x == std::numeric_limits<int64_t>::min() && y == -1) overflow();
      int64_t q = x / y, r = x % y;
      if (r != 0 && ((r < 0) != (y < 0))) {
        --q;
        r += y;
      }
      return op == "//" ? Value(q) : Value(r);
    }
    const double x = a.to_double(), y = b.to_double();
    if (op == "//") return Value(std::floor(x / y));
    double r = std::fmod(x, y);
    if (r != 0 && ((r < 0) != (y < 0))) r += y;
    return Value(r);
  }
  if (op == "**") {
    if (ints && to_int(b) >= 0) {
      int64_t r = 1, base = to_int(a);
      // By squaring: the exponent may be huge when the base is 0, 1 or -1.
      for (int64_t e = to_int(b); e > 0; e >>= 1) {
        if (e & 1) r = mul(r, base);
        if (e > 1) base = mul(base, base);
      }
      return Value(r);
    }
    return Value(std::pow(a.to_double(), b.to_double()));
  }
  return bad();
}

bool compare_op(std::string_view op, const Value& a, const Value& b) {
  if (op == "==") return equals(a, b);
  if (op == "!=") return !equals(a, b);
  if (op == "<") return less_than(a, b);
  if (op == ">") return less_than(b, a);
  if (op == "<=") return !less_than(b, a);
  if (op == ">=") return !less_than(a, b);
  const bool negate = op == "not in";
  bool found = false;
  if (b.is_string()) {
    if (!a.is_string())
      type_error(
          fmt::format("'in <string>' requires string as left operand, not {}", a.type_name()));
    found = b.as_string().find(a.as_string()) != std::string::npos;
  } else if (b.is_dict()) {
    found = a.is_string() && b.as_dict().find(a.as_string()) != nullptr;
  } else if (b.is_list()) {
    for (const auto& v : b.items())
      if (equals(a, v)) found = true;
  } else if (!b.is_undefined()) {
    type_error(fmt::format("argument of type '{}' is not iterable", b.type_name()));
  }
  return found != negate;
}

Value get_attr(const Value& obj, const std::string& name) {
  if (obj.is_undefined()) type_error(fmt::format("'{}' is undefined", obj.undefined_name()));
  if (obj.is_dict()) {
    if (!obj.as_dict().is_namespace) {
      Value m = dict_method(obj, name);
      if (!m.is_undefined()) return m;
    }
    const Value* v = obj.as_dict().find(name);
    return v ? *v : Value(Undefined{name});
  }
  if (obj.is_string()) return string_method(obj.as_string(), name);
  return Value(Undefined{name});
}

Value get_item(const Value& obj, const Value& key) {
  if (obj.is_undefined()) type_error(fmt::format("'{}' is undefined", obj.undefined_name()));
  if (obj.is_dict() && key.is_string()) {
    const Value* v = obj.as_dict().find(key.as_string());
    if (v) return *v;
    return get_attr(obj, key.as_string());
  }
  if ((obj.is_list() || obj.is_string()) && int_like(key)) {
    const std::vector<Value> seq = obj.is_list() ? obj.items() : obj.iterate();
    int64_t i = to_int(key);
    if (i < 0) i += static_cast<int64_t>(seq.size());
    if (i < 0 || i >= static_cast<int64_t>(seq.size()))
      return Value(Undefined{"[" + key.repr() + "]"});
    return seq[i];
  }
  if (key.is_string()) return get_attr(obj, key.as_string());
  return Value(Undefined{"[" + key.repr() + "]"});
}

Value get_slice(const Value& obj, const Value& start_v, const Value& stop_v, const Value& step_v) {
  if (!obj.is_list() && !obj.is_string())
    type_error(fmt::format("'{}' object is not subscriptable", obj.type_name()));
  const std::vector<Value> seq = obj.is_list() ? obj.items() : obj.iterate();
  const auto n = static_cast<int64_t>(seq.size());
  const auto part = [](const Value& v) -> std::optional<int64_t> {
    if (v.is_undefined() || v.is_none()) return std::nullopt;
    if (!int_like(v)) type_error("slice indices must be integers or None");
    return to_int(v);
  };
  const int64_t step = part(step_v).value_or(1);
  if (step == 0) type_error("slice step cannot be zero");
  const auto clamp = [&](std::optional<int64_t> v, int64_t dflt) {
    if (!v) return dflt;
    int64_t i = *v < 0 ? *v + n : *v;
    if (step > 0) return std::clamp<int64_t>(i, 0, n);
    return std::clamp<int64_t>(i, -1, n - 1);
  };
  const int64_t start = clamp(part(start_v), step > 0 ? 0 : n - 1);
  const int64_t stop = clamp(part(stop_v), step > 0 ? n : -1);
  std::vector<Value> out;
  for (int64_t i = start; step > 0 ? i < stop : i > stop;) {
    out.push_back(seq[i]);
    if (__builtin_add_overflow(i, step, &i)) break;  // past the 64-bit range is past the end
  }
  if (obj.is_list()) return Value::list(std::move(out), obj.as_list().tuple);
  std::string s;
  for (const auto& c : out) s += c.as_string();
  return Value(s);
}

namespace {

using FilterFn = Value (*)(const Value&, const CallArgs&);
using TestFn = bool (*)(const Value&, const CallArgs&);

Value attribute_path(const Value& v, const Value& attr) {
  // "a.b" walks nested attributes; an integer picks a list index.
  if (int_like(attr)) return get_item(v, attr);
  if (!attr.is_string()) type_error("an attribute must be a string or an integer");
  Value cur = v;
  const std::string& path = attr.as_string();
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    cur = get_item(cur, Value(path.substr(start, dot - start)));
    if (dot == std::string::npos || cur.is_undefined()) return cur;
    start = dot + 1;
  }
}

CallArgs rest_args(const CallArgs& a, size_t from) {
  CallArgs r;
  if (from < a.args.size()) r.args.assign(a.args.begin() + from, a.args.end());
  r.kwargs = a.kwargs;
  return r;
}

Value filter_tojson(const Value& v, const CallArgs& a) {
  JsonOptions o;
  o.ensure_ascii = arg_or(a, 0, "ensure_ascii", Value(false)).truthy();
  const Value indent = arg_or(a, 1, "indent", Value(None{}));
  if (indent.is_int())
    o.indent = std::string(checked_width(indent.as_int()), ' ');
  else if (indent.is_string())
    o.indent = indent.as_string();
  if (o.indent) o.item_separator = ",";
  const Value seps = arg_or(a, 2, "separators", Value(None{}));
  if (seps.is_list() && seps.items().size() == 2) {
    o.item_separator = seps.items()[0].str();
    o.key_separator = seps.items()[1].str();
  }
  o.sort_keys = arg_or(a, 3, "sort_keys", Value(false)).truthy();
  return Value(to_json(v, o));
}

Value filter_items(const Value& v, const CallArgs&) {
  if (v.is_undefined()) return Value::list({});
  if (!v.is_dict())
    type_error(fmt::format("can only get item pairs from a mapping, not {}", v.type_name()));
  return dict_method(v, "items").as_function()(CallArgs{});
}

Value filter_length(const Value& v, const CallArgs&) {
  return Value(v.length());
}

Value filter_join(const Value& v, const CallArgs& a) {
  const std::string sep = arg_or(a, 0, "d", Value("")).str();
  const Value attr = arg_or(a, 1, "attribute", Value(None{}));
  std::string out;
  bool first = true;
  for (const auto& item : v.iterate()) {
    if (!first) out += sep;
    first = false;
    out += (attr.is_none() ? item : attribute_path(item, attr)).str();
    check_string_size(out.size());
  }
  return Value(out);
}

Value filter_trim(const Value& v, const CallArgs& a) {
  return Value(strip(v.str(), arg_or(a, 0, "chars"), true, true));
}
Value filter_upper(const Value& v, const CallArgs&) {
  return Value(map_chars(v.str(), upper));
}
Value filter_lower(const Value& v, const CallArgs&) {
  return Value(map_chars(v.str(), lower));
}
Value filter_capitalize(const Value& v, const CallArgs&) {
  return Value(capitalize(v.str()));
}
Value filter_title(const Value& v, const CallArgs&) {
  return Value(jinja_title(v.str()));
}
Value filter_string(const Value& v, const CallArgs&) {
  return Value(v.str());
}
Value filter_safe(const Value& v, const CallArgs&) {
  return v;
}

Value filter_default(const Value& v, const CallArgs& a) {
  const bool boolean = arg_or(a, 1, "boolean", Value(false)).truthy();
  if (v.is_undefined() || (boolean && !v.truthy())) return arg_or(a, 0, "default_value", Value(""));
  return v;
}

Value filter_first(const Value& v, const CallArgs&) {
  const auto items = v.iterate();
  return items.empty() ? Value(Undefined{"first"}) : items.front();
}

Value filter_last(const Value& v, const CallArgs&) {
  const auto items = v.iterate();
  return items.empty() ? Value(Undefined{"last"}) : items.back();
}

Value filter_int(const Value& v, const CallArgs& a) {
  const Value dflt = arg_or(a, 0, "default", Value(int64_t{0}));
  if (int_like(v)) return Value(to_int(v));
  if (v.is_float()) return Value(float_to_int(v.as_float()));
  if (v.is_string()) {
    const std::string s = strip(v.as_string(), Value(), true, true);
    try {
      size_t used = 0;
      const long long i =
          std::stoll(s, &used, static_cast<int>(to_int(arg_or(a, 1, "base", Value(10)))));
      if (used == s.size()) return Value(static_cast<int64_t>(i));
      const double d = std::stod(s, &used);
      if (used == s.size()) return Value(float_to_int(d));
    } catch (const std::exception&) {
    }
  }
  return dflt;
}

Value filter_float(const Value& v, const CallArgs& a) {
  const Value dflt = arg_or(a, 0, "default", Value(0.0));
  if (v.is_number()) return Value(v.to_double());
  if (v.is_string()) {
    const std::string s = strip(v.as_string(), Value(), true, true);
    try {
      size_t used = 0;
      const double d = std::stod(s, &used);
      if (used == s.size()) return Value(d);
    } catch (const std::exception&) {
    }
  }
  return dflt;
}

Value filter_list(const Value& v, const CallArgs&) {
  return Value::list(v.iterate());
}

Value filter_replace(const Value& v, const CallArgs& a) {
  const Value count = arg_or(a, 2, "count", Value(None{}));
  return Value(replace(v.str(), arg_or(a, 0, "old").str(), arg_or(a, 1, "new").str(),
                       count.is_int() ? count.as_int() : -1));
}

Value filter_map(const Value& v, const CallArgs& a) {
  std::vector<Value> out;
  if (auto attr = a.kwarg("attribute")) {
    const Value dflt = a.kwarg("default").value_or(Value());
    for (const auto& item : v.iterate()) {
      Value x = attribute_path(item, *attr);
      out.push_back(x.is_undefined() && !dflt.is_undefined() ? dflt : x);
    }
  } else {
    if (a.args.empty() || !a.args[0].is_string())
      type_error("map requires a filter name or attribute=");
    const CallArgs rest = rest_args(a, 1);
    for (const auto& item : v.iterate())
      out.push_back(apply_filter(a.args[0].as_string(), item, rest));
  }
  return Value::list(std::move(out));
}

// select/reject/selectattr/rejectattr share one loop.
Value select_impl(const Value& v, const CallArgs& a, bool by_attr, bool keep) {
  std::vector<Value> out;
  const size_t test_pos = by_attr ? 1 : 0;
  for (const auto& item : v.iterate()) {
    const Value x = by_attr ? attribute_path(item, arg_or(a, 0, "attribute")) : item;
    bool ok;
    if (a.args.size() > test_pos) {
      ok = apply_test(a.args[test_pos].str(), x, rest_args(a, test_pos + 1));
    } else {
      ok = x.truthy();
    }
    if (ok == keep) out.push_back(item);
  }
  return Value::list(std::move(out));
}

Value filter_select(const Value& v, const CallArgs& a) {
  return select_impl(v, a, false, true);
}
Value filter_reject(const Value& v, const CallArgs& a) {
  return select_impl(v, a, false, false);
}
Value filter_selectattr(const Value& v, const CallArgs& a) {
  return select_impl(v, a, true, true);
}
Value filter_rejectattr(const Value& v, const CallArgs& a) {
  return select_impl(v, a, true, false);
}

Value filter_unique(const Value& v, const CallArgs& a) {
  const bool case_sensitive = arg_or(a, 0, "case_sensitive", Value(false)).truthy();
  const Value attr = arg_or(a, 1, "attribute", Value(None{}));
  std::vector<Value> out, seen;
  for (const auto& item : v.iterate()) {
    Value key = attr.is_none() ? item : attribute_path(item, attr);
    if (!case_sensitive && key.is_string()) key = Value(map_chars(key.as_string(), lower));
    if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return equals(s, key); })) {
      seen.push_back(key);
      out.push_back(item);
    }
  }
  return Value::list(std::move(out));
}

Value filter_indent(const Value& v, const CallArgs& a) {
  const Value width = arg_or(a, 0, "width", Value(4));
  const bool first = arg_or(a, 1, "first", Value(false)).truthy();
  const bool blank = arg_or(a, 2, "blank", Value(false)).truthy();
  const std::string pad =
      width.is_string() ? width.as_string() : std::string(checked_width(to_int(width)), ' ');
  // str.splitlines() on s + "\n", as Jinja does.
  const std::string s = v.str() + "\n";
  std::vector<std::string> lines;
  size_t start = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\n' || s[i] == '\r') {
      lines.push_back(s.substr(start, i - start));
      if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
      start = i + 1;
    }
  }
  std::string rv;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i) rv += "\n";
    if (i > 0 && (blank || !lines[i].empty())) rv += pad;
    rv += lines[i];
    check_string_size(rv.size());
  }
  return Value(first ? pad + rv : rv);
}

Value filter_abs(const Value& v, const CallArgs&) {
  if (int_like(v)) return Value(to_int(v) < 0 ? sub(0, to_int(v)) : to_int(v));
  if (v.is_float()) return Value(std::fabs(v.as_float()));
  type_error(fmt::format("bad operand type for abs(): '{}'", v.type_name()));
}

Value filter_reverse(const Value& v, const CallArgs&) {
  auto items = v.iterate();
  std::reverse(items.begin(), items.end());
  if (v.is_string()) {
    std::string s;
    for (const auto& c : items) s += c.as_string();
    return Value(s);
  }
  return Value::list(std::move(items));
}

const std::unordered_map<std::string, FilterFn>& filters() {
  static const std::unordered_map<std::string, FilterFn> f = {
      {"tojson", filter_tojson},
      {"items", filter_items},
      {"length", filter_length},
      {"count", filter_length},
      {"join", filter_join},
      {"trim", filter_trim},
      {"upper", filter_upper},
      {"lower", filter_lower},
      {"default", filter_default},
      {"d", filter_default},
      {"first", filter_first},
      {"last", filter_last},
      {"string", filter_string},
      {"int", filter_int},
      {"float", filter_float},
      {"list", filter_list},
      {"replace", filter_replace},
      {"safe", filter_safe},
      {"capitalize", filter_capitalize},
      {"title", filter_title},
      {"map", filter_map},
      {"select", filter_select},
      {"reject", filter_reject},
      {"selectattr", filter_selectattr},
      {"rejectattr", filter_rejectattr},
      {"unique", filter_unique},
      {"indent", filter_indent},
      {"abs", filter_abs},
      {"reverse", filter_reverse},
  };
  return f;
}

bool test_defined(const Value& v, const CallArgs&) {
  return !v.is_undefined();
}
bool test_undefined(const Value& v, const CallArgs&) {
  return v.is_undefined();
}
bool test_none(const Value& v, const CallArgs&) {
  return v.is_none();
}
bool test_string(const Value& v, const CallArgs&) {
  return v.is_string();
}
bool test_mapping(const Value& v, const CallArgs&) {
  return v.is_dict();
}
bool test_iterable(const Value& v, const CallArgs&) {
  return v.is_string() || v.is_list() || v.is_dict() || v.is_undefined();
}
bool test_sequence(const Value& v, const CallArgs&) {
  return v.is_string() || v.is_list() || v.is_dict() || v.is_undefined();
}
bool test_number(const Value& v, const CallArgs&) {
  return v.is_number();
}
bool test_integer(const Value& v, const CallArgs&) {
  return v.is_int();
}
bool test_float(const Value& v, const CallArgs&) {
  return v.is_float();
}
bool test_boolean(const Value& v, const CallArgs&) {
  return v.is_bool();
}
bool test_true(const Value& v, const CallArgs&) {
  return v.is_bool() && v.as_bool();
}
bool test_false(const Value& v, const CallArgs&) {
  return v.is_bool() && !v.as_bool();
}
bool test_callable(const Value& v, const CallArgs&) {
  return v.is_callable();
}
bool test_eq(const Value& v, const CallArgs& a) {
  return equals(v, arg_or(a, 0, "other"));
}
bool test_ne(const Value& v, const CallArgs& a) {
  return !equals(v, arg_or(a, 0, "other"));
}
bool test_lt(const Value& v, const CallArgs& a) {
  return less_than(v, arg_or(a, 0, "other"));
}
bool test_gt(const Value& v, const CallArgs& a) {
  return less_than(arg_or(a, 0, "other"), v);
}
bool test_le(const Value& v, const CallArgs& a) {
  return !less_than(arg_or(a, 0, "other"), v);
}
bool test_ge(const Value& v, const CallArgs& a) {
  return !less_than(v, arg_or(a, 0, "other"));
}
bool test_in(const Value& v, const CallArgs& a) {
  return compare_op("in", v, arg_or(a, 0, "seq"));
}
bool test_odd(const Value& v, const CallArgs&) {
  return int_like(v) && to_int(v) % 2 != 0;
}
bool test_even(const Value& v, const CallArgs&) {
  return int_like(v) && to_int(v) % 2 == 0;
}
bool test_divisibleby(const Value& v, const CallArgs& a) {
  const Value n = arg_or(a, 0, "num");
  if (!int_like(v) || !int_like(n) || to_int(n) == 0)
    type_error("divisibleby needs non-zero integers");
  return to_int(v) % to_int(n) == 0;
}
bool test_sameas(const Value& v, const CallArgs& a) {
  const Value o = arg_or(a, 0, "other");
  if (v.is_bool() && o.is_bool()) return v.as_bool() == o.as_bool();
  if (v.is_none() && o.is_none()) return true;
  return false;
}
bool test_lower(const Value& v, const CallArgs&) {
  return v.is_string() && map_chars(v.as_string(), lower) == v.as_string();
}
bool test_upper(const Value& v, const CallArgs&) {
  return v.is_string() && map_chars(v.as_string(), upper) == v.as_string();
}

const std::unordered_map<std::string, TestFn>& tests() {
  static const std::unordered_map<std::string, TestFn> t = {
      {"defined", test_defined},
      {"undefined", test_undefined},
      {"none", test_none},
      {"string", test_string},
      {"mapping", test_mapping},
      {"iterable", test_iterable},
      {"sequence", test_sequence},
      {"number", test_number},
      {"integer", test_integer},
      {"float", test_float},
      {"boolean", test_boolean},
      {"true", test_true},
      {"false", test_false},
      {"callable", test_callable},
      {"eq", test_eq},
      {"equalto", test_eq},
      {"==", test_eq},
      {"ne", test_ne},
      {"!=", test_ne},
      {"lt", test_lt},
      {"<", test_lt},
      {"lessthan", test_lt},
      {"gt", test_gt},
      {">", test_gt},
      {"greaterthan", test_gt},
      {"le", test_le},
      {"<=", test_le},
      {"ge", test_ge},
      {">=", test_ge},
      {"in", test_in},
      {"odd", test_odd},
      {"even", test_even},
      {"divisibleby", test_divisibleby},
      {"sameas", test_sameas},
      {"lower", test_lower},
      {"upper", test_upper},
  };
  return t;
}

Value fn_range(const CallArgs& a) {
  for (const auto& v : a.args)
    if (!int_like(v)) type_error("range() arguments must be integers");
  int64_t start = 0, stop, step = 1;
  if (a.args.size() == 1) {
    stop = to_int(a.args[0]);
  } else if (a.args.size() == 2 || a.args.size() == 3) {
    start = to_int(a.args[0]);
    stop = to_int(a.args[1]);
    if (a.args.size() == 3) step = to_int(a.args[2]);
  } else {
    type_error("range expected 1 to 3 arguments");
  }
  if (step == 0) type_error("range() arg 3 must not be zero");
  std::vector<Value> out;
  for (int64_t i = start; step > 0 ? i < stop : i > stop;) {
    out.emplace_back(i);
    if (out.size() > kMaxListItems)
      type_error(fmt::format("range() of more than {} items", kMaxListItems));
    if (__builtin_add_overflow(i, step, &i)) break;  // past the 64-bit range is past stop
  }
  return Value::list(std::move(out));
}

Value dict_of(const CallArgs& a, bool is_namespace) {
  Value d = Value::dict();
  d.as_dict().is_namespace = is_namespace;
  if (!a.args.empty() && a.args[0].is_dict())
    for (const auto& [k, v] : a.args[0].as_dict().items) d.as_dict().set(k, v);
  for (const auto& [k, v] : a.kwargs) d.as_dict().set(k, v);
  return d;
}

Value fn_dict(const CallArgs& a) {
  return dict_of(a, false);
}

Value fn_namespace(const CallArgs& a) {
  return dict_of(a, true);
}

Value fn_raise_exception(const CallArgs& a) {
  throw ValueError(arg_or(a, 0, "message").str());
}

Value fn_strftime_now(const CallArgs& a) {
  const std::string format = arg_or(a, 0, "format").str();
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char buf[256];
  const size_t n = std::strftime(buf, sizeof buf, format.c_str(), &tm);
  return Value(std::string(buf, n));
}

}  // namespace

Value apply_filter(const std::string& name, const Value& subject, const CallArgs& args) {
  auto it = filters().find(name);
  if (it == filters().end()) type_error(fmt::format("no filter named '{}'", name));
  return it->second(subject, args);
}

bool apply_test(const std::string& name, const Value& subject, const CallArgs& args) {
  auto it = tests().find(name);
  if (it == tests().end()) type_error(fmt::format("no test named '{}'", name));
  return it->second(subject, args);
}

Value global_function(const std::string& name) {
  if (name == "range") return Value::function(fn_range);
  if (name == "dict") return Value::function(fn_dict);
  if (name == "namespace") return Value::function(fn_namespace);
  if (name == "raise_exception") return Value::function(fn_raise_exception);
  if (name == "strftime_now") return Value::function(fn_strftime_now);
  return Value(Undefined{name});
}

}  // namespace mls::chat::jinja
