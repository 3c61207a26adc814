#include "chat/jinja_parser.h"

#include "chat/jinja_lexer.h"
#include "chat/jinja_limits.h"
#include "chat/template_error.h"

namespace mls::chat::jinja {
namespace {

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : toks_(std::move(tokens)) {}

  Body parse_template() {
    Body body = parse_body({});
    if (peek().type != Token::kEof) fail(peek(), "unexpected tag");
    return body;
  }

 private:
  const Token& peek(size_t ahead = 0) const {
    return toks_[std::min(pos_ + ahead, toks_.size() - 1)];
  }
  const Token& next() { return toks_[pos_ < toks_.size() - 1 ? pos_++ : pos_]; }

  [[noreturn]] void fail(const Token& t, const std::string& msg) const {
    throw TemplateSyntaxError(
        fmt::format("chat template line {}, column {}: {}", t.line, t.col, msg));
  }

  // One level of the parser's own recursion (a nested expression or statement) for its
  // lifetime, so that `((((...` or `{% if %}{% if %}...` fails instead of exhausting the stack.
  class Nest {
   public:
    explicit Nest(Parser& p) : p_(p) {
      if (++p.nesting_ > kMaxSyntaxDepth)
        p.fail(p.peek(), fmt::format("the template nests deeper than {} levels", kMaxSyntaxDepth));
    }
    ~Nest() { --p_.nesting_; }
    Nest(const Nest&) = delete;
    Nest& operator=(const Nest&) = delete;

   private:
    Parser& p_;
  };

  // A node whose operands are all attached: its tree height is known and bounded here, since
  // loops (`a + a + ... + a`, `x.a.b.c...`) build trees deeper than the parser recurses.
  ExprPtr done(ExprPtr e) {
    int h = 0;
    for (const auto& a : e->args)
      if (a) h = std::max(h, a->height);
    for (const auto& [k, v] : e->kwargs) h = std::max(h, v->height);
    e->height = h + 1;
    if (e->height > kMaxSyntaxDepth)
      throw TemplateSyntaxError(
          fmt::format("chat template line {}, column {}: an expression nests deeper than {} levels",
                      e->line, e->col, kMaxSyntaxDepth));
    return e;
  }

  static std::string describe(const Token& t) {
    switch (t.type) {
      case Token::kEof:
        return "end of template";
      case Token::kBlockEnd:
        return "end of statement block";
      case Token::kVarEnd:
        return "end of print statement";
      case Token::kText:
        return "template text";
      default:
        return "'" + t.value + "'";
    }
  }

  bool is_op(const char* op, size_t ahead = 0) const {
    return peek(ahead).type == Token::kOp && peek(ahead).value == op;
  }
  bool is_name(const char* name, size_t ahead = 0) const {
    return peek(ahead).type == Token::kName && peek(ahead).value == name;
  }
  void expect_op(const char* op) {
    if (!is_op(op)) fail(peek(), fmt::format("expected '{}', got {}", op, describe(peek())));
    next();
  }
  std::string expect_name() {
    if (peek().type != Token::kName)
      fail(peek(), fmt::format("expected a name, got {}", describe(peek())));
    return next().value;
  }
  void expect_block_end() {
    if (peek().type != Token::kBlockEnd)
      fail(peek(), fmt::format("expected end of statement block, got {}", describe(peek())));
    next();
  }

  // True when the next tokens are "{% <one of names>".
  bool at_block(std::initializer_list<const char*> names) const {
    if (peek().type != Token::kBlockBegin) return false;
    for (const char* n : names)
      if (is_name(n, 1)) return true;
    return false;
  }

  // Parses statements until one of `end_names` opens a block (left unconsumed) or EOF.
  Body parse_body(std::initializer_list<const char*> end_names) {
    Body body;
    while (true) {
      const Token& t = peek();
      if (t.type == Token::kEof) {
        if (end_names.size() > 0)
          fail(t, fmt::format("unexpected end of template, expected '{}'", *end_names.begin()));
        return body;
      }
      if (t.type == Token::kText) {
        auto s = make_stmt(Stmt::kText, t);
        s->text = next().value;
        body.push_back(std::move(s));
      } else if (t.type == Token::kVarBegin) {
        auto s = make_stmt(Stmt::kOutput, next());
        s->expr = parse_expression();
        if (peek().type != Token::kVarEnd)
          fail(peek(), fmt::format("expected end of print statement, got {}", describe(peek())));
        next();
        body.push_back(std::move(s));
      } else if (t.type == Token::kBlockBegin) {
        if (at_block(end_names)) return body;
        body.push_back(parse_statement());
      } else {
        fail(t, "unexpected " + describe(t));
      }
    }
  }

  StmtPtr make_stmt(Stmt::Kind kind, const Token& t) {
    auto s = std::make_unique<Stmt>();
    s->kind = kind;
    s->line = t.line;
    s->col = t.col;
    return s;
  }

  StmtPtr parse_statement() {
    const Nest nest(*this);
    next();  // {%
    ++block_depth_;
    StmtPtr s = parse_statement_body();
    --block_depth_;
    return s;
  }

  StmtPtr parse_statement_body() {
    const Token& kw = peek();
    if (kw.type != Token::kName) fail(kw, "expected a statement name");
    const std::string word = next().value;
    if (word == "if") return parse_if(kw);
    if (word == "for") return parse_for(kw);
    if (word == "set") return parse_set(kw);
    if (word == "macro") {
      if (block_depth_ > 1) fail(kw, "macros must be defined at the top level of the template");
      return parse_macro(kw);
    }
    if (word == "break" || word == "continue") {
      if (loop_depth_ == 0) fail(kw, fmt::format("'{}' outside of a loop", word));
      auto s = make_stmt(word == "break" ? Stmt::kBreak : Stmt::kContinue, kw);
      expect_block_end();
      return s;
    }
    fail(kw, fmt::format("unknown or unsupported tag '{}'", word));
  }

  void expect_end_tag(const char* name) {
    next();  // {%
    const Token& t = peek();
    if (!is_name(name)) fail(t, fmt::format("expected '{}'", name));
    next();
    expect_block_end();
  }

  StmtPtr parse_if(const Token& kw) {
    auto s = make_stmt(Stmt::kIf, kw);
    ExprPtr cond = parse_expression();
    expect_block_end();
    Body body = parse_body({"elif", "else", "endif"});
    s->branches.emplace_back(std::move(cond), std::move(body));
    while (true) {
      next();  // {%
      const std::string word = next().value;
      if (word == "elif") {
        ExprPtr c = parse_expression();
        expect_block_end();
        Body b = parse_body({"elif", "else", "endif"});
        s->branches.emplace_back(std::move(c), std::move(b));
      } else if (word == "else") {
        expect_block_end();
        s->body = parse_body({"endif"});
        expect_end_tag("endif");
        return s;
      } else {
        expect_block_end();
        return s;
      }
    }
  }

  StmtPtr parse_for(const Token& kw) {
    auto s = make_stmt(Stmt::kFor, kw);
    s->targets.push_back(expect_name());
    while (is_op(",")) {
      next();
      s->targets.push_back(expect_name());
    }
    if (!is_name("in")) fail(peek(), "expected 'in'");
    next();
    s->expr = parse_expression(/*with_condexpr=*/false);
    if (is_name("if")) {
      next();
      s->filter = parse_expression();
    }
    if (is_name("recursive")) fail(peek(), "recursive loops are not supported");
    expect_block_end();
    ++loop_depth_;
    s->body = parse_body({"else", "endfor"});
    --loop_depth_;
    if (is_name("else", 1)) {
      next();
      next();
      expect_block_end();
      s->else_body = parse_body({"endfor"});
    }
    expect_end_tag("endfor");
    return s;
  }

  StmtPtr parse_set(const Token& kw) {
    auto s = make_stmt(Stmt::kSet, kw);
    s->targets.push_back(expect_name());
    if (is_op(".")) {
      next();
      s->attr = expect_name();
    } else {
      while (is_op(",")) {
        next();
        s->targets.push_back(expect_name());
      }
    }
    if (peek().type == Token::kBlockEnd && s->attr.empty() && s->targets.size() == 1) {
      next();
      s->kind = Stmt::kSetBlock;
      s->body = parse_body({"endset"});
      expect_end_tag("endset");
      return s;
    }
    expect_op("=");
    s->expr = parse_tuple_or_expression();
    expect_block_end();
    return s;
  }

  StmtPtr parse_macro(const Token& kw) {
    auto s = make_stmt(Stmt::kMacro, kw);
    s->name = expect_name();
    expect_op("(");
    while (!is_op(")")) {
      if (!s->params.empty()) expect_op(",");
      if (is_op(")")) break;
      s->params.push_back(expect_name());
      if (is_op("=")) {
        next();
        s->defaults.push_back(parse_expression());
      } else {
        if (!s->defaults.empty() && s->defaults.back())
          fail(peek(), "non-default argument follows default argument");
        s->defaults.push_back(nullptr);
      }
    }
    next();
    expect_block_end();
    const int saved = loop_depth_;
    loop_depth_ = 0;
    s->body = parse_body({"endmacro"});
    loop_depth_ = saved;
    expect_end_tag("endmacro");
    return s;
  }

  // ----- expressions -----

  ExprPtr make(Expr::Kind kind, const Token& t) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = t.line;
    e->col = t.col;
    return e;
  }

  // "a, b" on the right of set is a tuple.
  ExprPtr parse_tuple_or_expression() {
    const Token& start = peek();
    ExprPtr first = parse_expression();
    if (!is_op(",")) return first;
    auto t = make(Expr::kTuple, start);
    t->args.push_back(std::move(first));
    while (is_op(",")) {
      next();
      t->args.push_back(parse_expression());
    }
    return t;
  }

  ExprPtr parse_expression(bool with_condexpr = true) {
    const Nest nest(*this);
    ExprPtr e = parse_or();
    if (!with_condexpr) return e;
    while (is_name("if")) {
      const Token& t = next();
      auto c = make(Expr::kCondExpr, t);
      ExprPtr cond = parse_or();
      ExprPtr other;
      if (is_name("else")) {
        next();
        other = parse_expression();
      }
      c->args.push_back(std::move(cond));
      c->args.push_back(std::move(e));
      c->args.push_back(std::move(other));
      e = done(std::move(c));
    }
    return e;
  }

  ExprPtr binary(Expr::Kind kind, const Token& t, ExprPtr l, ExprPtr r, std::string op = "") {
    auto e = make(kind, t);
    e->name = std::move(op);
    e->args.push_back(std::move(l));
    e->args.push_back(std::move(r));
    return done(std::move(e));
  }

  ExprPtr parse_or() {
    ExprPtr l = parse_and();
    while (is_name("or")) {
      const Token& t = next();
      l = binary(Expr::kOr, t, std::move(l), parse_and());
    }
    return l;
  }

  ExprPtr parse_and() {
    ExprPtr l = parse_not();
    while (is_name("and")) {
      const Token& t = next();
      l = binary(Expr::kAnd, t, std::move(l), parse_not());
    }
    return l;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      const Nest nest(*this);
      const Token& t = next();
      auto e = make(Expr::kUnary, t);
      e->name = "not";
      e->args.push_back(parse_not());
      return done(std::move(e));
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    const Token& start = peek();
    ExprPtr first = parse_math1();
    ExprPtr cmp;
    while (true) {
      std::string op;
      if (peek().type == Token::kOp &&
          (peek().value == "==" || peek().value == "!=" || peek().value == "<" ||
           peek().value == ">" || peek().value == "<=" || peek().value == ">=")) {
        op = next().value;
      } else if (is_name("in")) {
        next();
        op = "in";
      } else if (is_name("not") && is_name("in", 1)) {
        next();
        next();
        op = "not in";
      } else {
        break;
      }
      if (!cmp) {
        cmp = make(Expr::kCompare, start);
        cmp->args.push_back(std::move(first));
      }
      cmp->ops.push_back(op);
      cmp->args.push_back(parse_math1());
    }
    return cmp ? done(std::move(cmp)) : std::move(first);
  }

  ExprPtr parse_math1() {
    ExprPtr l = parse_concat();
    while (is_op("+") || is_op("-")) {
      const Token& t = next();
      l = binary(Expr::kBinary, t, std::move(l), parse_concat(), t.value);
    }
    return l;
  }

  ExprPtr parse_concat() {
    ExprPtr l = parse_math2();
    while (is_op("~")) {
      const Token& t = next();
      l = binary(Expr::kBinary, t, std::move(l), parse_math2(), "~");
    }
    return l;
  }

  ExprPtr parse_math2() {
    ExprPtr l = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token& t = next();
      l = binary(Expr::kBinary, t, std::move(l), parse_pow(), t.value);
    }
    return l;
  }

  ExprPtr parse_pow() {
    ExprPtr l = parse_unary();
    while (is_op("**")) {
      const Token& t = next();
      l = binary(Expr::kBinary, t, std::move(l), parse_unary(), "**");
    }
    return l;
  }

  ExprPtr parse_unary(bool with_filter = true) {
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      const Nest nest(*this);
      const Token& t = next();
      e = make(Expr::kUnary, t);
      e->name = t.value;
      e->args.push_back(parse_unary(false));
      e = done(std::move(e));
    } else {
      e = parse_postfix(parse_primary());
    }
    return with_filter ? parse_filter_expr(std::move(e)) : std::move(e);
  }

  ExprPtr parse_primary() {
    const Token& t = peek();
    switch (t.type) {
      case Token::kName: {
        next();
        auto e = make(Expr::kLiteral, t);
        if (t.value == "true" || t.value == "True")
          e->value = Value(true);
        else if (t.value == "false" || t.value == "False")
          e->value = Value(false);
        else if (t.value == "none" || t.value == "None")
          e->value = Value(None{});
        else {
          e->kind = Expr::kName;
          e->name = t.value;
        }
        return e;
      }
      case Token::kString: {
        auto e = make(Expr::kLiteral, t);
        std::string s = next().value;
        while (peek().type == Token::kString) s += next().value;  // adjacent literals join
        e->value = Value(std::move(s));
        return e;
      }
      case Token::kInt: {
        auto e = make(Expr::kLiteral, t);
        e->value = int_literal(next());
        return e;
      }
      case Token::kFloat: {
        auto e = make(Expr::kLiteral, t);
        try {
          e->value = Value(std::stod(next().value));
        } catch (const std::out_of_range&) {
          fail(t, "float literal out of range");
        }
        return e;
      }
      case Token::kOp:
        if (t.value == "(") {
          next();
          if (is_op(")")) {
            next();
            return make(Expr::kTuple, t);
          }
          ExprPtr first = parse_expression();
          if (is_op(")")) {
            next();
            return first;
          }
          auto tup = make(Expr::kTuple, t);
          tup->args.push_back(std::move(first));
          while (is_op(",")) {
            next();
            if (is_op(")")) break;
            tup->args.push_back(parse_expression());
          }
          expect_op(")");
          return done(std::move(tup));
        }
        if (t.value == "[") {
          next();
          auto l = make(Expr::kList, t);
          while (!is_op("]")) {
            if (!l->args.empty()) expect_op(",");
            if (is_op("]")) break;
            l->args.push_back(parse_expression());
          }
          next();
          return done(std::move(l));
        }
        if (t.value == "{") {
          next();
          auto d = make(Expr::kDict, t);
          while (!is_op("}")) {
            if (!d->args.empty()) expect_op(",");
            if (is_op("}")) break;
            d->args.push_back(parse_expression());
            expect_op(":");
            d->args.push_back(parse_expression());
          }
          next();
          return done(std::move(d));
        }
        break;
      default:
        break;
    }
    fail(t, "unexpected " + describe(t));
  }

  Value int_literal(const Token& t) {
    try {
      return Value(static_cast<int64_t>(std::stoll(t.value)));
    } catch (const std::out_of_range&) {
      fail(t, "integer literal out of range");
    }
  }

  ExprPtr parse_postfix(ExprPtr e) {
    while (true) {
      if (is_op(".")) {
        const Token& t = next();
        auto a = make(Expr::kAttr, t);
        if (peek().type == Token::kInt) {  // foo.0 is foo[0]
          a->kind = Expr::kItem;
          a->args.push_back(std::move(e));
          auto idx = make(Expr::kLiteral, peek());
          idx->value = int_literal(next());
          a->args.push_back(std::move(idx));
        } else {
          a->name = expect_name();
          a->args.push_back(std::move(e));
        }
        e = done(std::move(a));
      } else if (is_op("[")) {
        e = parse_subscript(std::move(e));
      } else if (is_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr target) {
    const Token& t = next();  // [
    ExprPtr parts[3];
    int colons = 0;
    while (!is_op("]")) {
      if (is_op(":")) {
        if (++colons > 2) fail(peek(), "too many ':' in slice");
        next();
        continue;
      }
      if (parts[colons]) fail(peek(), "expected ':' or ']'");
      parts[colons] = parse_expression();
    }
    next();
    auto e = make(colons ? Expr::kSlice : Expr::kItem, t);
    e->args.push_back(std::move(target));
    if (!colons) {
      if (!parts[0]) fail(t, "empty subscript");
      e->args.push_back(std::move(parts[0]));
    } else {
      for (auto& p : parts) e->args.push_back(std::move(p));
    }
    return done(std::move(e));
  }

  ExprPtr parse_call(ExprPtr callee) {
    auto c = make(Expr::kCall, peek());
    c->line = callee->line;  // errors point at what was called, not at "("
    c->col = callee->col;
    c->args.push_back(std::move(callee));
    parse_arg_list(*c);
    return done(std::move(c));
  }

  // "(a, b, key=c)": positional arguments go after whatever e->args already holds.
  void parse_arg_list(Expr& e) {
    expect_op("(");
    bool first = true;
    while (!is_op(")")) {
      if (!first) expect_op(",");
      first = false;
      if (is_op(")")) break;
      if (peek().type == Token::kName && is_op("=", 1)) {
        std::string key = next().value;
        next();
        e.kwargs.emplace_back(std::move(key), parse_expression());
      } else {
        if (!e.kwargs.empty()) fail(peek(), "positional argument follows keyword argument");
        e.args.push_back(parse_expression());
      }
    }
    next();
  }

  ExprPtr parse_filter_expr(ExprPtr e) {
    while (true) {
      if (is_op("|")) {
        next();
        const Token& t = peek();
        auto f = make(Expr::kFilter, t);
        f->name = expect_name();
        f->args.push_back(std::move(e));
        if (is_op("(")) parse_arg_list(*f);
        e = done(std::move(f));
      } else if (is_name("is")) {
        next();
        const Token& t = peek();
        auto test = make(Expr::kTest, t);
        if (is_name("not")) {
          next();
          test->negated = true;
        }
        const Token& nt = peek();
        if (nt.type == Token::kName)
          test->name = next().value;
        else if (nt.type == Token::kOp &&
                 (nt.value == "==" || nt.value == "!=" || nt.value == "<" || nt.value == ">" ||
                  nt.value == "<=" || nt.value == ">="))
          test->name = next().value;
        else
          fail(nt, "expected a test name");
        test->args.push_back(std::move(e));
        if (is_op("(")) {
          parse_arg_list(*test);
        } else if (takes_bare_argument()) {
          test->args.push_back(parse_unary(false));
        }
        e = done(std::move(test));
      } else if (is_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  // "x is divisibleby 3", "x is sameas false": a test may take one argument without parens.
  bool takes_bare_argument() const {
    const Token& t = peek();
    if (t.type == Token::kString || t.type == Token::kInt || t.type == Token::kFloat) return true;
    if (t.type == Token::kName)
      return t.value != "else" && t.value != "or" && t.value != "and" && t.value != "if" &&
             t.value != "is" && t.value != "in" && t.value != "not";
    return t.type == Token::kOp && (t.value == "[" || t.value == "{" || t.value == "-");
  }

  std::vector<Token> toks_;
  size_t pos_ = 0;
  int loop_depth_ = 0;
  int block_depth_ = 0;  // statements enclosing the current one
  int nesting_ = 0;      // the parser's recursion (Nest)
};

}  // namespace

Body parse(std::string_view source) {
  return Parser(tokenize(source)).parse_template();
}

}  // namespace mls::chat::jinja
