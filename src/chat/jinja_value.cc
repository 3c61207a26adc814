#include "chat/jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <iterator>

#include <fmt/format.h>

#include "chat/jinja_limits.h"
#include "tokenizer/utf8.h"

namespace mls::chat::jinja {
namespace {

// Nesting and namespace flag of a container over `children`; throws past the limits.
template <class Data, class Range, class Get>
void summarise(Data& d, const Range& children, Get value_of) {
  if (std::size(children) > kMaxListItems)
    throw ValueError(fmt::format("a list or dict of more than {} items", kMaxListItems));
  for (const auto& c : children) {
    const Value& v = value_of(c);
    d.depth = std::max(d.depth, v.depth() + 1);
    d.holds_namespace = d.holds_namespace || v.holds_namespace();
  }
  if (d.depth > kMaxValueDepth)
    throw ValueError(fmt::format("a value nests deeper than {} levels", kMaxValueDepth));
}

}  // namespace

const Value* DictData::find(std::string_view key) const {
  for (const auto& [k, v] : items)
    if (k == key) return &v;
  return nullptr;
}

void DictData::set(std::string key, Value v) {
  if (is_namespace && v.holds_namespace())
    throw ValueError("a namespace cannot hold another namespace in chat templates");
  const Value* one[] = {&v};
  summarise(*this, one, [](const Value* x) -> const Value& { return *x; });
  for (auto& [k, old] : items)
    if (k == key) {
      old = std::move(v);
      return;
    }
  items.emplace_back(std::move(key), std::move(v));
}

std::optional<Value> CallArgs::get(size_t pos, std::string_view name) const {
  for (const auto& [k, v] : kwargs)
    if (k == name) return v;
  if (pos < args.size()) return args[pos];
  return std::nullopt;
}

std::optional<Value> CallArgs::kwarg(std::string_view name) const {
  for (const auto& [k, v] : kwargs)
    if (k == name) return v;
  return std::nullopt;
}

Value Value::list(std::vector<Value> items, bool tuple) {
  auto l = std::make_shared<ListData>();
  summarise(*l, items, [](const Value& x) -> const Value& { return x; });
  l->items = std::move(items);
  l->tuple = tuple;
  return Value(std::move(l));
}

Value Value::dict(std::vector<std::pair<std::string, Value>> items) {
  auto d = std::make_shared<DictData>();
  summarise(*d, items, [](const auto& kv) -> const Value& { return kv.second; });
  d->items = std::move(items);
  return Value(std::move(d));
}

Value Value::function(Function f) {
  return Value(std::make_shared<Function>(std::move(f)));
}

namespace {

Value from_json_at(const nlohmann::ordered_json& j, int depth) {
  if (depth > kMaxValueDepth)
    throw ValueError(fmt::format("JSON nests deeper than {} levels", kMaxValueDepth));
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null:
      return Value(None{});
    case nlohmann::ordered_json::value_t::boolean:
      return Value(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return Value(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned:
      return Value(static_cast<int64_t>(j.get<uint64_t>()));
    case nlohmann::ordered_json::value_t::number_float:
      return Value(j.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return Value(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(from_json_at(e, depth + 1));
      return Value::list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      std::vector<std::pair<std::string, Value>> items;
      items.reserve(j.size());
      for (const auto& [k, e] : j.items()) items.emplace_back(k, from_json_at(e, depth + 1));
      return Value::dict(std::move(items));
    }
    default:
      throw ValueError("unsupported JSON value");
  }
}

}  // namespace

Value Value::from_json(const nlohmann::ordered_json& j) {
  return from_json_at(j, 1);
}

int Value::depth() const {
  if (is_list()) return as_list().depth;
  if (is_dict()) return as_dict().depth;
  return 0;
}

bool Value::holds_namespace() const {
  if (is_list()) return as_list().holds_namespace;
  if (is_dict()) return as_dict().is_namespace || as_dict().holds_namespace;
  return false;
}

double Value::to_double() const {
  if (is_int()) return static_cast<double>(as_int());
  if (is_bool()) return as_bool() ? 1.0 : 0.0;
  return as_float();
}

bool Value::truthy() const {
  return std::visit(
      [](const auto& x) -> bool {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, Undefined> || std::is_same_v<T, None>)
          return false;
        else if constexpr (std::is_same_v<T, bool>)
          return x;
        else if constexpr (std::is_same_v<T, int64_t> || std::is_same_v<T, double>)
          return x != 0;
        else if constexpr (std::is_same_v<T, std::string>)
          return !x.empty();
        else if constexpr (std::is_same_v<T, std::shared_ptr<ListData>>)
          return !x->items.empty();
        else if constexpr (std::is_same_v<T, std::shared_ptr<DictData>>)
          return !x->items.empty();
        else
          return true;
      },
      v_);
}

std::string Value::type_name() const {
  if (is_undefined()) return "Undefined";
  if (is_none()) return "NoneType";
  if (is_bool()) return "bool";
  if (is_int()) return "int";
  if (is_float()) return "float";
  if (is_string()) return "str";
  if (is_list()) return as_list().tuple ? "tuple" : "list";
  if (is_dict()) return as_dict().is_namespace ? "Namespace" : "dict";
  return "function";
}

std::string format_float(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  // Shortest round-trip digits, then Python's layout: fixed for 1e-4 <= |d| < 1e16.
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  std::string sign;
  if (sci[0] == '-') {
    sign = "-";
    sci.erase(0, 1);
  }
  const size_t e_pos = sci.find('e');
  const int exp = std::stoi(sci.substr(e_pos + 1));
  std::string digits = sci.substr(0, e_pos);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  if (exp >= -4 && exp < 16) {
    std::string out;
    if (exp < 0) {
      out = "0." + std::string(-exp - 1, '0') + digits;
    } else if (static_cast<int>(digits.size()) <= exp + 1) {
      out = digits + std::string(exp + 1 - digits.size(), '0') + ".0";
    } else {
      out = digits.substr(0, exp + 1) + "." + digits.substr(exp + 1);
    }
    return sign + out;
  }
  std::string mant = digits.substr(0, 1);
  if (digits.size() > 1) mant += "." + digits.substr(1);
  const int a = std::abs(exp);
  return sign + mant + (exp < 0 ? "e-" : "e+") + (a < 10 ? "0" : "") + std::to_string(a);
}

namespace {

// Python's str.isprintable() for the code points templates meet: controls, separators other
// than the ASCII space, and format characters are escaped by repr().
bool printable(char32_t c) {
  if (c < 0x20 || (c >= 0x7F && c <= 0xA0) || c == 0xAD) return false;
  if ((c >= 0x2000 && c <= 0x200F) || (c >= 0x2028 && c <= 0x202F) ||
      (c >= 0x205F && c <= 0x206F) || c == 0x3000 || c == 0xFEFF)
    return false;
  if (c >= 0xD800 && c <= 0xDFFF) return false;
  if (c >= 0xE000 && c <= 0xF8FF) return false;  // private use
  return true;
}

std::string repr_string(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos;
  const bool has_double = s.find('"') != std::string::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (char32_t c : tok::utf8_to_u32(s)) {
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (!printable(c)) {
      out += c < 0x100     ? fmt::format("\\x{:02x}", static_cast<uint32_t>(c))
             : c < 0x10000 ? fmt::format("\\u{:04x}", static_cast<uint32_t>(c))
                           : fmt::format("\\U{:08x}", static_cast<uint32_t>(c));
    } else {
      tok::append_utf8(out, c);
    }
  }
  out += quote;
  return out;
}

}  // namespace

std::string Value::str() const {
  if (is_undefined()) return "";
  if (is_string()) return as_string();
  return repr();
}

std::string Value::repr() const {
  if (is_undefined()) return "Undefined";
  if (is_none()) return "None";
  if (is_bool()) return as_bool() ? "True" : "False";
  if (is_int()) return std::to_string(as_int());
  if (is_float()) return format_float(as_float());
  if (is_string()) return repr_string(as_string());
  if (is_list()) {
    const ListData& l = as_list();
    std::string out = l.tuple ? "(" : "[";
    for (size_t i = 0; i < l.items.size(); ++i) {
      if (i) out += ", ";
      out += l.items[i].repr();
    }
    if (l.tuple && l.items.size() == 1) out += ",";
    return out + (l.tuple ? ")" : "]");
  }
  if (is_dict()) {
    const DictData& d = as_dict();
    std::string out = "{";
    for (size_t i = 0; i < d.items.size(); ++i) {
      if (i) out += ", ";
      out += repr_string(d.items[i].first) + ": " + d.items[i].second.repr();
    }
    out += "}";
    return d.is_namespace ? "<Namespace " + out + ">" : out;
  }
  return "<function>";
}

std::vector<Value> Value::iterate() const {
  if (is_undefined()) return {};
  if (is_list()) return items();
  if (is_dict()) {
    std::vector<Value> keys;
    for (const auto& [k, v] : as_dict().items) keys.emplace_back(k);
    return keys;
  }
  if (is_string()) {
    std::vector<Value> chars;
    for (char32_t c : tok::utf8_to_u32(as_string())) {
      std::string ch;
      tok::append_utf8(ch, c);
      chars.emplace_back(std::move(ch));
    }
    return chars;
  }
  throw ValueError(fmt::format("'{}' object is not iterable", type_name()));
}

int64_t Value::length() const {
  if (is_undefined()) return 0;
  if (is_string()) return static_cast<int64_t>(tok::utf8_to_u32(as_string()).size());
  if (is_list()) return static_cast<int64_t>(items().size());
  if (is_dict()) return static_cast<int64_t>(as_dict().items.size());
  throw ValueError(fmt::format("object of type '{}' has no len()", type_name()));
}

bool equals(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if ((a.is_int() || a.is_bool()) && (b.is_int() || b.is_bool()))
      return static_cast<int64_t>(a.to_double()) == static_cast<int64_t>(b.to_double()) &&
             a.to_double() == b.to_double();
    return a.to_double() == b.to_double();
  }
  if (a.is_string() && b.is_string()) return a.as_string() == b.as_string();
  if (a.is_none() && b.is_none()) return true;
  if (a.is_undefined() && b.is_undefined()) return true;
  if (a.is_list() && b.is_list()) {
    const auto &x = a.items(), &y = b.items();
    if (x.size() != y.size()) return false;
    for (size_t i = 0; i < x.size(); ++i)
      if (!equals(x[i], y[i])) return false;
    return true;
  }
  if (a.is_dict() && b.is_dict()) {
    const DictData &x = a.as_dict(), &y = b.as_dict();
    if (x.items.size() != y.items.size()) return false;
    for (const auto& [k, v] : x.items) {
      const Value* o = y.find(k);
      if (!o || !equals(v, *o)) return false;
    }
    return true;
  }
  if (a.is_callable() && b.is_callable()) return &a.as_function() == &b.as_function();
  return false;
}

bool less_than(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) return a.to_double() < b.to_double();
  if (a.is_string() && b.is_string()) return a.as_string() < b.as_string();  // code point order
  if (a.is_list() && b.is_list()) {
    const auto &x = a.items(), &y = b.items();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!equals(x[i], y[i])) return less_than(x[i], y[i]);
    }
    return x.size() < y.size();
  }
  throw ValueError(fmt::format("'<' not supported between instances of '{}' and '{}'",
                               a.type_name(), b.type_name()));
}

namespace {

void json_string(const std::string& s, bool ensure_ascii, std::string& out) {
  out += '"';
  for (char32_t c : tok::utf8_to_u32(s)) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20 || (ensure_ascii && c > 0x7E)) {
          if (c >= 0x10000) {  // UTF-16 surrogate pair, as Python writes it
            const char32_t v = c - 0x10000;
            out += fmt::format("\\u{:04x}\\u{:04x}", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
          } else {
            out += fmt::format("\\u{:04x}", static_cast<uint32_t>(c));
          }
        } else {
          tok::append_utf8(out, c);
        }
    }
  }
  out += '"';
}

void json_value(const Value& v, const JsonOptions& o, int depth, std::string& out) {
  const auto newline = [&](int d) {
    if (!o.indent) return;
    out += '\n';
    for (int i = 0; i < d; ++i) out += *o.indent;
  };
  if (v.is_none()) {
    out += "null";
  } else if (v.is_bool()) {
    out += v.as_bool() ? "true" : "false";
  } else if (v.is_int()) {
    out += std::to_string(v.as_int());
  } else if (v.is_float()) {
    const double d = v.as_float();
    out += std::isnan(d)   ? "NaN"
           : std::isinf(d) ? (d > 0 ? "Infinity" : "-Infinity")
                           : format_float(d);
  } else if (v.is_string()) {
    json_string(v.as_string(), o.ensure_ascii, out);
  } else if (v.is_list()) {
    const auto& items = v.items();
    if (items.empty()) {
      out += "[]";
      return;
    }
    out += '[';
    for (size_t i = 0; i < items.size(); ++i) {
      if (i) out += o.item_separator;
      newline(depth + 1);
      json_value(items[i], o, depth + 1, out);
    }
    newline(depth);
    out += ']';
  } else if (v.is_dict()) {
    std::vector<const std::pair<std::string, Value>*> items;
    for (const auto& kv : v.as_dict().items) items.push_back(&kv);
    if (o.sort_keys)
      std::stable_sort(items.begin(), items.end(),
                       [](const auto* a, const auto* b) { return a->first < b->first; });
    if (items.empty()) {
      out += "{}";
      return;
    }
    out += '{';
    for (size_t i = 0; i < items.size(); ++i) {
      if (i) out += o.item_separator;
      newline(depth + 1);
      json_string(items[i]->first, o.ensure_ascii, out);
      out += o.key_separator;
      json_value(items[i]->second, o, depth + 1, out);
    }
    newline(depth);
    out += '}';
  } else {
    throw ValueError(fmt::format("Object of type {} is not JSON serializable", v.type_name()));
  }
}

}  // namespace

std::string to_json(const Value& v, const JsonOptions& options) {
  std::string out;
  json_value(v, options, 0, out);
  return out;
}

}  // namespace mls::chat::jinja
