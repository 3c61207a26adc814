// Syntax tree of a parsed template. One node type per family keeps the evaluator a plain
// switch; every node records where it came from for error messages.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "chat/jinja_value.h"

namespace mls::chat::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum Kind {
    kLiteral,  // value
    kName,     // name
    kList,     // args
    kTuple,    // args
    kDict,     // kwargs keys are the evaluated args[2i], values args[2i+1]
    kAttr,     // args[0].name
    kItem,     // args[0][args[1]]
    kSlice,    // args[0][args[1]:args[2]:args[3]] (null parts allowed)
    kCall,     // args[0](args[1..], kwargs)
    kFilter,   // args[0] | name(args[1..], kwargs)
    kTest,     // args[0] is [not] name(args[1..], kwargs); negated
    kUnary,    // op args[0]: "-", "+", "not"
    kBinary,   // args[0] op args[1]: + - * / // % ** ~
    kCompare,  // args[0] ops[0] args[1] ops[1] args[2] ...
    kAnd,
    kOr,
    kCondExpr,  // args[1] if args[0] else args[2] (args[2] may be null)
  };
  Kind kind;
  int line = 0, col = 0;
  Value value;
  std::string name;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;
  bool negated = false;
  int height = 1;  // of this node's tree; the parser bounds it by kMaxSyntaxDepth
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct Stmt {
  enum Kind { kText, kOutput, kIf, kFor, kSet, kSetBlock, kMacro, kBreak, kContinue };
  Kind kind;
  int line = 0, col = 0;
  std::string text;                                // kText
  ExprPtr expr;                                    // kOutput value, kFor iterable, kSet value
  std::vector<std::pair<ExprPtr, Body>> branches;  // kIf: condition, body
  Body body;                                       // kFor, kSetBlock, kMacro; kIf: else
  Body else_body;                                  // kFor
  ExprPtr filter;                                  // kFor "if" clause
  std::vector<std::string> targets;  // kFor / kSet names; kSet "ns.attr" keeps attr in `attr`
  std::string attr;
  std::string name;                 // kMacro
  std::vector<std::string> params;  // kMacro
  std::vector<ExprPtr> defaults;    // kMacro, aligned with params (null = required)
};

}  // namespace mls::chat::jinja
