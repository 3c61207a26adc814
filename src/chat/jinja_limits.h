// Bounds on what a chat template may do. Templates come from model repositories and render
// request data, so neither may crash the server or hold it: nesting is bounded before it can
// exhaust the stack, sizes before they can exhaust memory, and work before it can wedge a
// thread. Exceeding one is a TemplateSyntaxError (parse) or TemplateRuntimeError (render).
// docs/server.md ("Limits") lists them.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/json.h"

namespace mls::chat::jinja {

// Nesting of a template's syntax: statements inside statements, and the height of one
// expression's tree (`((((x))))`, `a + a + ... + a`). Real chat templates stay below 20.
inline constexpr int kMaxSyntaxDepth = 128;
// Nested evaluation while rendering: expressions, statement bodies and macro calls (a recursive
// macro is cut off here).
inline constexpr int kMaxRenderDepth = 256;
// Nesting of list/dict values: request JSON (at most kMaxJsonDepth, placed a few levels down in
// messages and tools) plus what a template wraps around it.
inline constexpr int kMaxValueDepth = kMaxJsonDepth + 64;
// Largest string a template may build (the rendered prompt included): twice the largest request
// body the server accepts.
inline constexpr size_t kMaxStringBytes = size_t{64} << 20;
// Most items in a list a template may build (range(), *, +, filters).
inline constexpr size_t kMaxListItems = 1'000'000;
// Evaluation steps (statements and expressions) per render, by default: about ten seconds of
// work, far beyond a real request, so that a runaway loop ends with an error.
inline constexpr int64_t kMaxRenderSteps = 200'000'000;

}  // namespace mls::chat::jinja
