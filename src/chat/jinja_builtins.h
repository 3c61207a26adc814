// Jinja2's built-in behaviour over Values: operators with Python semantics, attribute and item
// access (including str/dict methods), filters, tests and global functions.
#pragma once

#include <string>
#include <string_view>

#include "chat/jinja_value.h"

namespace mls::chat::jinja {

// + - * / // % ** ~ with Python semantics; throws ValueError on type errors.
Value binary_op(std::string_view op, const Value& a, const Value& b);
// == != < > <= >= in "not in".
bool compare_op(std::string_view op, const Value& a, const Value& b);

// obj.name: dict methods take precedence over keys, as in Jinja's getattr; missing -> Undefined.
Value get_attr(const Value& obj, const std::string& name);
// obj[key]: keys and indexes first, then attributes; missing -> Undefined.
Value get_item(const Value& obj, const Value& key);
// obj[start:stop:step] with Python semantics (null parts are Undefined values).
Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step);

Value apply_filter(const std::string& name, const Value& subject, const CallArgs& args);
bool apply_test(const std::string& name, const Value& subject, const CallArgs& args);

// range, namespace, dict, raise_exception, strftime_now.
Value global_function(const std::string& name);

}  // namespace mls::chat::jinja
