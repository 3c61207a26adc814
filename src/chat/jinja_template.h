// A compiled Jinja template and its renderer. Rendering follows Jinja2's semantics for the
// supported subset: scoping (a for loop or macro body is a new scope, so `set` inside it does
// not leak; namespace() objects carry state out), Undefined for missing names and attributes,
// and Python's str() for printed values.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "chat/jinja_ast.h"
#include "chat/jinja_limits.h"
#include "chat/jinja_value.h"

namespace mls::chat::jinja {

class Template {
 public:
  // Throws TemplateSyntaxError.
  explicit Template(std::string_view source);

  // Renders with `vars` as the template's globals (besides range, namespace, dict,
  // raise_exception and strftime_now). Throws TemplateRuntimeError with line and column, also
  // when the render exceeds a limit of jinja_limits.h or takes more than `max_steps`
  // evaluation steps.
  std::string render(const std::vector<std::pair<std::string, Value>>& vars,
                     int64_t max_steps = kMaxRenderSteps) const;

 private:
  Body body_;
};

}  // namespace mls::chat::jinja
