#include "chat/jinja_template.h"

#include <algorithm>
#include <limits>
#include <unordered_map>

#include "chat/jinja_builtins.h"
#include "chat/jinja_parser.h"
#include "chat/template_error.h"

namespace mls::chat::jinja {
namespace {

struct Frame {
  const Frame* parent = nullptr;
  std::unordered_map<std::string, Value> vars;

  Value lookup(const std::string& name) const {
    for (const Frame* f = this; f; f = f->parent) {
      auto it = f->vars.find(name);
      if (it != f->vars.end()) return it->second;
    }
    return global_function(name);
  }
};

enum class Flow { kNormal, kBreak, kContinue };

[[noreturn]] void fail_at(int line, int col, const std::string& msg) {
  throw TemplateRuntimeError(fmt::format("chat template line {}, column {}: {}", line, col, msg));
}

class Renderer {
 public:
  explicit Renderer(int64_t max_steps) : steps_left_(max_steps) {}

  Flow exec(const Body& body, Frame& frame, std::string& out) {
    for (const auto& s : body) {
      const Flow f = exec(*s, frame, out);
      if (f != Flow::kNormal) return f;
    }
    return Flow::kNormal;
  }

 private:
  // Counts one evaluation step and one level of nesting for its lifetime; past a limit the
  // render fails at the construct being evaluated.
  class Step {
   public:
    Step(Renderer& r, int line, int col) : r_(r) {
      if (--r.steps_left_ < 0)
        fail_at(line, col, "the template takes too many steps to render (a runaway loop?)");
      if (r.depth_ >= kMaxRenderDepth)
        fail_at(line, col,
                fmt::format("the template nests deeper than {} levels while rendering (recursive "
                            "macro?)",
                            kMaxRenderDepth));
      ++r.depth_;
    }
    ~Step() { --r_.depth_; }
    Step(const Step&) = delete;
    Step& operator=(const Step&) = delete;

   private:
    Renderer& r_;
  };

  static void append(std::string& out, const std::string& text, const Stmt& s) {
    if (out.size() + text.size() > kMaxStringBytes)
      fail_at(s.line, s.col, fmt::format("the rendered text exceeds {} bytes", kMaxStringBytes));
    out += text;
  }

  Flow exec(const Stmt& s, Frame& frame, std::string& out) {
    const Step step(*this, s.line, s.col);
    switch (s.kind) {
      case Stmt::kText:
        append(out, s.text, s);
        return Flow::kNormal;
      case Stmt::kOutput:
        append(out, eval(*s.expr, frame).str(), s);
        return Flow::kNormal;
      case Stmt::kIf:
        for (const auto& [cond, body] : s.branches)
          if (eval(*cond, frame).truthy()) return exec(body, frame, out);
        return exec(s.body, frame, out);
      case Stmt::kFor:
        return exec_for(s, frame, out);
      case Stmt::kSet:
        exec_set(s, frame);
        return Flow::kNormal;
      case Stmt::kSetBlock: {
        std::string captured;
        Frame inner{&frame, {}};
        exec(s.body, inner, captured);
        frame.vars[s.targets[0]] = Value(std::move(captured));
        return Flow::kNormal;
      }
      case Stmt::kMacro:
        frame.vars[s.name] = make_macro(s, frame);
        return Flow::kNormal;
      case Stmt::kBreak:
        return Flow::kBreak;
      case Stmt::kContinue:
        return Flow::kContinue;
    }
    return Flow::kNormal;
  }

  void assign(const Stmt& s, const std::vector<std::string>& targets, const Value& v,
              Frame& frame) {
    if (targets.size() == 1) {
      frame.vars[targets[0]] = v;
      return;
    }
    if (!v.is_list() && !v.is_string() && !v.is_dict())
      fail_at(s.line, s.col, fmt::format("cannot unpack non-iterable {} object", v.type_name()));
    const auto items = v.iterate();
    if (items.size() != targets.size())
      fail_at(s.line, s.col,
              fmt::format("cannot unpack {} values into {} names", items.size(), targets.size()));
    for (size_t i = 0; i < targets.size(); ++i) frame.vars[targets[i]] = items[i];
  }

  void exec_set(const Stmt& s, Frame& frame) {
    Value v = eval(*s.expr, frame);
    if (s.attr.empty()) {
      assign(s, s.targets, v, frame);
      return;
    }
    const Value ns = frame.lookup(s.targets[0]);
    if (!ns.is_dict() || !ns.as_dict().is_namespace)
      fail_at(s.line, s.col, "cannot assign attribute on non-namespace object");
    try {
      ns.as_dict().set(s.attr, std::move(v));
    } catch (const ValueError& e) {
      fail_at(s.line, s.col, e.what());
    }
  }

  Flow exec_for(const Stmt& s, Frame& frame, std::string& out) {
    Value iterable = eval(*s.expr, frame);
    std::vector<Value> items;
    try {
      items = iterable.iterate();
    } catch (const ValueError& e) {
      fail_at(s.expr->line, s.expr->col, e.what());
    }
    if (s.filter) {  // the "if" clause filters before loop.length is known
      std::vector<Value> kept;
      for (auto& item : items) {
        Frame probe{&frame, {}};
        assign(s, s.targets, item, probe);
        if (eval(*s.filter, probe).truthy()) kept.push_back(std::move(item));
      }
      items = std::move(kept);
    }
    if (items.empty()) return exec(s.else_body, frame, out);
    const auto n = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < n; ++i) {
      const Step step(*this, s.line, s.col);  // an empty body still costs its iterations
      Frame inner{&frame, {}};
      assign(s, s.targets, items[i], inner);
      inner.vars["loop"] = Value::dict({
          {"index", Value(i + 1)},
          {"index0", Value(i)},
          {"revindex", Value(n - i)},
          {"revindex0", Value(n - i - 1)},
          {"first", Value(i == 0)},
          {"last", Value(i == n - 1)},
          {"length", Value(n)},
          {"previtem", i > 0 ? items[i - 1] : Value(Undefined{"previtem"})},
          {"nextitem", i + 1 < n ? items[i + 1] : Value(Undefined{"nextitem"})},
      });
      if (exec(s.body, inner, out) == Flow::kBreak) break;
    }
    return Flow::kNormal;
  }

  // The parser only allows macros at the top level, so `defining` outlives every call.
  Value make_macro(const Stmt& s, const Frame& defining) {
    const Stmt* macro = &s;
    const Frame* scope = &defining;
    return Value::function([this, macro, scope](const CallArgs& a) {
      Frame frame{scope, {}};
      if (a.args.size() > macro->params.size())
        throw ValueError(fmt::format("macro '{}' takes not more than {} argument(s)", macro->name,
                                     macro->params.size()));
      for (size_t i = 0; i < macro->params.size(); ++i) {
        const std::string& p = macro->params[i];
        std::optional<Value> v = a.get(i, p);
        if (!v) v = macro->defaults[i] ? eval(*macro->defaults[i], frame) : Value(Undefined{p});
        frame.vars[p] = *v;
      }
      for (const auto& [k, v] : a.kwargs)
        if (std::find(macro->params.begin(), macro->params.end(), k) == macro->params.end())
          throw ValueError(fmt::format("macro '{}' has no argument named '{}'", macro->name, k));
      std::string out;
      exec(macro->body, frame, out);
      return Value(std::move(out));
    });
  }

  CallArgs eval_args(const Expr& e, size_t first, Frame& frame) {
    CallArgs a;
    for (size_t i = first; i < e.args.size(); ++i) a.args.push_back(eval(*e.args[i], frame));
    for (const auto& [k, v] : e.kwargs) a.kwargs.emplace_back(k, eval(*v, frame));
    return a;
  }

  Value eval(const Expr& e, Frame& frame) {
    const Step step(*this, e.line, e.col);
    try {
      Value v = eval_inner(e, frame);
      if (v.is_string() && v.as_string().size() > kMaxStringBytes)
        throw ValueError(fmt::format("a string of more than {} bytes", kMaxStringBytes));
      return v;
    } catch (const ValueError& err) {
      fail_at(e.line, e.col, err.what());
    }
  }

  Value eval_inner(const Expr& e, Frame& frame) {
    switch (e.kind) {
      case Expr::kLiteral:
        return e.value;
      case Expr::kName:
        return frame.lookup(e.name);
      case Expr::kList:
      case Expr::kTuple: {
        std::vector<Value> items;
        for (const auto& a : e.args) items.push_back(eval(*a, frame));
        return Value::list(std::move(items), e.kind == Expr::kTuple);
      }
      case Expr::kDict: {
        Value d = Value::dict();
        for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
          const Value k = eval(*e.args[i], frame);
          if (!k.is_string()) throw ValueError("dict keys must be strings in chat templates");
          d.as_dict().set(k.as_string(), eval(*e.args[i + 1], frame));
        }
        return d;
      }
      case Expr::kAttr:
        return get_attr(eval(*e.args[0], frame), e.name);
      case Expr::kItem:
        return get_item(eval(*e.args[0], frame), eval(*e.args[1], frame));
      case Expr::kSlice: {
        const Value obj = eval(*e.args[0], frame);
        const auto part = [&](int i) {
          return e.args[i] ? eval(*e.args[i], frame) : Value(None{});
        };
        return get_slice(obj, part(1), part(2), part(3));
      }
      case Expr::kCall: {
        const Value callee = eval(*e.args[0], frame);
        if (callee.is_undefined())
          throw ValueError(fmt::format("'{}' is undefined", callee.undefined_name()));
        if (!callee.is_callable())
          throw ValueError(fmt::format("'{}' object is not callable", callee.type_name()));
        return callee.as_function()(eval_args(e, 1, frame));
      }
      case Expr::kFilter:
        return apply_filter(e.name, eval(*e.args[0], frame), eval_args(e, 1, frame));
      case Expr::kTest: {
        const Value subject = eval(*e.args[0], frame);
        return Value(apply_test(e.name, subject, eval_args(e, 1, frame)) != e.negated);
      }
      case Expr::kUnary: {
        const Value v = eval(*e.args[0], frame);
        if (e.name == "not") return Value(!v.truthy());
        if (v.is_int() || v.is_bool()) {
          const int64_t i = v.is_bool() ? v.as_bool() : v.as_int();
          if (e.name == "-" && i == std::numeric_limits<int64_t>::min())
            throw ValueError("integer result out of the 64-bit range");
          return Value(e.name == "-" ? -i : i);
        }
        if (v.is_float()) return Value(e.name == "-" ? -v.as_float() : v.as_float());
        throw ValueError(fmt::format("bad operand type for unary {}: '{}'", e.name, v.type_name()));
      }
      case Expr::kBinary:
        return binary_op(e.name, eval(*e.args[0], frame), eval(*e.args[1], frame));
      case Expr::kCompare: {
        Value left = eval(*e.args[0], frame);
        for (size_t i = 0; i < e.ops.size(); ++i) {
          Value right = eval(*e.args[i + 1], frame);
          if (!compare_op(e.ops[i], left, right)) return Value(false);
          left = std::move(right);
        }
        return Value(true);
      }
      case Expr::kAnd: {  // Python returns the deciding operand, not a bool
        Value l = eval(*e.args[0], frame);
        return l.truthy() ? eval(*e.args[1], frame) : l;
      }
      case Expr::kOr: {
        Value l = eval(*e.args[0], frame);
        return l.truthy() ? l : eval(*e.args[1], frame);
      }
      case Expr::kCondExpr:
        if (eval(*e.args[0], frame).truthy()) return eval(*e.args[1], frame);
        return e.args[2] ? eval(*e.args[2], frame) : Value(Undefined{"else"});
    }
    return Value();
  }

  int64_t steps_left_;
  int depth_ = 0;
};

}  // namespace

Template::Template(std::string_view source) : body_(parse(source)) {}

std::string Template::render(const std::vector<std::pair<std::string, Value>>& vars,
                             int64_t max_steps) const {
  Frame globals;
  for (const auto& [k, v] : vars) globals.vars[k] = v;
  Frame top{&globals, {}};
  Renderer r(max_steps);
  std::string out;
  r.exec(body_, top, out);
  return out;
}

}  // namespace mls::chat::jinja
