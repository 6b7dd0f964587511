// A Jinja interpreter for the subset chat and task templates use; see jinja.h. Values are JSON
// (nlohmann::ordered_json, keeping dict order as Python does) plus "undefined".
#include "foundry/text/jinja.h"

#include "foundry/text/py_float.h"
#include "foundry/text/pyre.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <functional>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "foundry/core/error.h"
#include "foundry/io/json_depth.h"

namespace foundry::text {

using json = nlohmann::ordered_json;

std::string py_str(const json& j) {
  if (j.is_string()) return j.get<std::string>();
  if (j.is_null()) return "None";
  if (j.is_boolean()) return j.get<bool>() ? "True" : "False";
  if (j.is_number_integer()) return std::to_string(j.get<int64_t>());
  if (j.is_number()) return py_float(j.get<double>());
  return py_repr(j);
}

std::string py_repr(const json& j) {
  if (j.is_string()) {
    // Python quotes with ' unless the text holds ' and no ".
    const std::string& t = j.get_ref<const std::string&>();
    const char q = t.find('\'') != std::string::npos && t.find('"') == std::string::npos ? '"' : '\'';
    std::string s(1, q);
    for (unsigned char c : t) {
      if (c == q || c == '\\') s += '\\', s += char(c);
      else if (c == '\n') s += "\\n";
      else if (c == '\r') s += "\\r";
      else if (c == '\t') s += "\\t";
      else if (c < 0x20 || c == 0x7f) s += fmt::format("\\x{:02x}", c);
      else s += char(c);
    }
    return s + q;
  }
  if (j.is_array()) {
    std::string s = "[";
    for (size_t i = 0; i < j.size(); ++i) s += (i ? ", " : "") + py_repr(j[i]);
    return s + "]";
  }
  if (j.is_object()) {
    std::string s = "{";
    bool first = true;
    for (auto it = j.begin(); it != j.end(); ++it, first = false) s += (first ? "" : ", ") + py_repr(json(it.key())) + ": " + py_repr(*it);
    return s + "}";
  }
  return py_str(j);
}

namespace {

struct Value {
  json j;
  bool undefined = false;
  std::string missing;  // the name an undefined value stands for, for StrictUndefined's message
};
Value val(json j) { return Value{std::move(j), false, {}}; }
Value undefined_value(std::string missing = {}) { return Value{json(), true, std::move(missing)}; }

// Errors name the template (set while parsing or rendering one; single-threaded per call).
thread_local const std::string* g_template_name = nullptr;

[[noreturn]] void fail(const std::string& what) {
  raise<ValueError>("{}: {}", g_template_name ? *g_template_name : std::string("template"), what);
}

bool truthy(const Value& v) {
  if (v.undefined || v.j.is_null()) return false;
  if (v.j.is_boolean()) return v.j.get<bool>();
  if (v.j.is_number_integer()) return v.j.get<int64_t>() != 0;
  if (v.j.is_number()) return v.j.get<double>() != 0;
  if (v.j.is_string()) return !v.j.get_ref<const std::string&>().empty();
  return !v.j.empty();
}

// Python's json.dumps (ensure_ascii=False): separators ", " / ": " without indent, "," / ": " with.
void py_json(const json& j, std::string& out, int indent, int depth) {
  auto newline = [&](int d) {
    if (indent < 0) return;
    out += '\n';
    out.append(size_t(indent * d), ' ');
  };
  if (j.is_object() || j.is_array()) {
    const bool obj = j.is_object();
    if (j.empty()) {
      out += obj ? "{}" : "[]";
      return;
    }
    out += obj ? '{' : '[';
    bool first = true;
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (!first) out += indent < 0 ? ", " : ",";
      first = false;
      newline(depth + 1);
      if (obj) {
        out += json(it.key()).dump(-1, ' ', false, json::error_handler_t::replace);
        out += ": ";
      }
      py_json(*it, out, indent, depth + 1);
    }
    newline(depth);
    out += obj ? '}' : ']';
    return;
  }
  if (j.is_number_float()) {
    out += py_float(j.get<double>());
    return;
  }
  out += j.dump(-1, ' ', false, json::error_handler_t::replace);
}

// Python's str() of a value.
std::string py_str(const Value& v) {
  if (v.undefined) return "";
  return text::py_str(v.j);
}

double number(const Value& v, const char* what) {
  if (!v.j.is_number() && !v.j.is_boolean()) fail(std::string(what) + " needs a number, got " + py_repr(v.j));
  return v.j.is_boolean() ? double(v.j.get<bool>()) : v.j.get<double>();
}
bool integral(const Value& v) { return v.j.is_number_integer() || v.j.is_boolean(); }
json number_json(double d, bool as_int) { return as_int ? json(int64_t(d)) : json(d); }

// ---- expressions -------------------------------------------------------------------------------

struct Expr;
using ExprPtr = std::shared_ptr<Expr>;
struct Expr {
  enum Kind { Literal, Name, List, Dict, Attr, Item, Slice, Call, Filter, Test, Unary, Binary, Cond } kind;
  json literal;
  std::string name;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  bool negate = false;
  int height = 1;  // levels of the tree below and including this node (see kMaxExprHeight)
};

// How deeply a template's blocks, an expression's brackets and a value it builds may nest, and how
// tall an expression's tree may grow. Parsing, evaluating, copying and freeing them recurse once per
// level: a chat template (a file from a model folder) of 100 000 nested parentheses or blocks, or a
// 100 000-term sum, overflowed the stack. Real templates nest a few levels. A chain of `+` or `|`
// is parsed in a loop but builds one tree level a link, evaluated by one small recursion each:
// jinja2 (Python's recursion limit) renders a 490-term sum and 327 chained filters, so the tree may
// be 512 levels tall.
constexpr int kMaxNesting = 256;
constexpr int kMaxExprHeight = 512;

// The start of a long source for an error message.
std::string excerpt(const std::string& s) { return s.size() <= 60 ? s : s.substr(0, 57) + "..."; }

// One level of a parser's recursion (a parenthesis, a list, an argument, a prefix operator, a
// block): `depth` counts the levels open; past kMaxNesting the parse fails with what(), built only
// then.
template <class What>
class NestingLevel {
 public:
  NestingLevel(int& depth, What what) : depth_(depth) {
    if (++depth_ > kMaxNesting) fail(what());
  }
  ~NestingLevel() { --depth_; }
  NestingLevel(const NestingLevel&) = delete;
  NestingLevel& operator=(const NestingLevel&) = delete;

 private:
  int& depth_;
};

struct Tok {
  enum Type { Name, Number, String, Op, End } type = End;
  std::string text;
  json value;
};

std::vector<Tok> lex(const std::string& s) {
  std::vector<Tok> out;
  size_t i = 0;
  while (i < s.size()) {
    const char c = s[i];
    if (std::isspace(static_cast<unsigned char>(c))) {
      ++i;
    } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t j = i;
      while (j < s.size() && (std::isalnum(static_cast<unsigned char>(s[j])) || s[j] == '_')) ++j;
      out.push_back({Tok::Name, s.substr(i, j - i), {}});
      i = j;
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t j = i;
      bool fl = false;
      while (j < s.size() && (std::isdigit(static_cast<unsigned char>(s[j])) || (s[j] == '.' && !fl && j + 1 < s.size() &&
                                                                                 std::isdigit(static_cast<unsigned char>(s[j + 1]))))) {
        fl |= s[j] == '.';
        ++j;
      }
      // An exponent makes a float literal (jinja2's lexer: 1e3, 2.5E-2).
      if (j < s.size() && (s[j] == 'e' || s[j] == 'E')) {
        size_t k = j + 1;
        if (k < s.size() && (s[k] == '+' || s[k] == '-')) ++k;
        if (k < s.size() && std::isdigit(static_cast<unsigned char>(s[k]))) {
          while (k < s.size() && std::isdigit(static_cast<unsigned char>(s[k]))) ++k;
          j = k;
          fl = true;
        }
      }
      const std::string t = s.substr(i, j - i);
      json value;
      if (fl) {
        value = std::strtod(t.c_str(), nullptr);  // beyond double's range: inf, as Python's float literal
      } else {
        int64_t n = 0;
        const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), n);
        if (ec != std::errc() || end != t.data() + t.size()) fail("integer literal " + excerpt(t) + " is beyond 64 bits");
        value = n;
      }
      out.push_back({Tok::Number, t, std::move(value)});
      i = j;
    } else if (c == '\'' || c == '"') {
      std::string v;
      size_t j = i + 1;
      for (; j < s.size() && s[j] != c; ++j) {
        if (s[j] == '\\' && j + 1 < s.size()) {
          // Python's string escapes; an unknown one keeps its backslash ('\[' is two characters).
          const char e = s[++j];
          if (e == 'n') v += '\n';
          else if (e == 't') v += '\t';
          else if (e == 'r') v += '\r';
          else if (e == '\\' || e == '\'' || e == '"') v += e;
          else if (e == '\n') continue;
          else v += '\\', v += e;
        } else {
          v += s[j];
        }
      }
      if (j >= s.size()) fail("unterminated string in '" + s + "'");
      out.push_back({Tok::String, v, json(v)});
      i = j + 1;
    } else {
      static const char* ops[] = {"**", "//", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "<", ">", "(",
                                  ")", "[", "]", "{", "}", ",", ":", ".", "|", "="};
      bool matched = false;
      for (const char* op : ops) {
        const size_t n = std::char_traits<char>::length(op);
        if (s.compare(i, n, op) == 0) {
          out.push_back({Tok::Op, op, {}});
          i += n;
          matched = true;
          break;
        }
      }
      if (!matched) fail("unexpected character '" + std::string(1, c) + "' in '" + s + "'");
    }
  }
  out.push_back({Tok::End, "", {}});
  return out;
}

class ExprParser {
 public:
  explicit ExprParser(std::vector<Tok> toks, std::string source) : t_(std::move(toks)), src_(std::move(source)) {}

  std::string too_deep() const {
    return "expression nests deeper than " + std::to_string(kMaxNesting) + " levels in '" + excerpt(src_) + "'";
  }
  // One level of this parser's recursion.
  auto level() {
    return NestingLevel(depth_, [this] { return too_deep(); });
  }
  // e with its height set from its operands; refused past kMaxExprHeight (a long chain of `+` or
  // `|` builds a tall tree without recursing while it parses).
  ExprPtr sealed(ExprPtr e) const {
    int below = 0;
    for (const ExprPtr& a : e->args)
      if (a) below = std::max(below, a->height);
    for (const auto& kv : e->kwargs)
      if (kv.second) below = std::max(below, kv.second->height);
    e->height = below + 1;
    if (e->height > kMaxExprHeight)
      fail("expression's tree is more than " + std::to_string(kMaxExprHeight) + " levels tall (a chain of operators or filters) in '" +
           excerpt(src_) + "'");
    return e;
  }

  ExprPtr parse() { return conditional(); }
  bool at_end() const { return peek().type == Tok::End; }
  const Tok& peek(size_t ahead = 0) const { return t_[std::min(p_ + ahead, t_.size() - 1)]; }
  bool is_op(const char* op) const { return peek().type == Tok::Op && peek().text == op; }
  bool is_word(const char* w) const { return peek().type == Tok::Name && peek().text == w; }
  void expect_op(const char* op) {
    if (!is_op(op)) fail("expected '" + std::string(op) + "' in '" + src_ + "'");
    ++p_;
  }
  std::string name() {
    if (peek().type != Tok::Name) fail("expected a name in '" + src_ + "'");
    return t_[p_++].text;
  }
  void skip() { ++p_; }

  ExprPtr conditional() {
    const auto nesting = level();
    ExprPtr e = or_expr();
    if (is_word("if")) {
      ++p_;
      auto c = std::make_shared<Expr>(Expr{Expr::Cond});
      ExprPtr cond = or_expr();
      ExprPtr other;
      if (is_word("else")) {
        ++p_;
        other = conditional();
      }
      c->args = {e, cond, other};
      return sealed(c);
    }
    return e;
  }

 private:
  ExprPtr binary(const std::string& op, ExprPtr a, ExprPtr b) {
    auto e = std::make_shared<Expr>(Expr{Expr::Binary});
    e->name = op;
    e->args = {std::move(a), std::move(b)};
    return sealed(e);
  }
  ExprPtr or_expr() {
    ExprPtr e = and_expr();
    while (is_word("or")) {
      ++p_;
      e = binary("or", e, and_expr());
    }
    return e;
  }
  ExprPtr and_expr() {
    ExprPtr e = not_expr();
    while (is_word("and")) {
      ++p_;
      e = binary("and", e, not_expr());
    }
    return e;
  }
  ExprPtr not_expr() {
    if (is_word("not")) {
      const auto nesting = level();
      ++p_;
      auto e = std::make_shared<Expr>(Expr{Expr::Unary});
      e->name = "not";
      e->args = {not_expr()};
      return sealed(e);
    }
    return compare();
  }
  ExprPtr compare() {
    ExprPtr e = concat();
    for (;;) {
      if (peek().type == Tok::Op && (peek().text == "==" || peek().text == "!=" || peek().text == "<" ||
                                     peek().text == ">" || peek().text == "<=" || peek().text == ">=")) {
        const std::string op = t_[p_++].text;
        e = binary(op, e, concat());
      } else if (is_word("in")) {
        ++p_;
        e = binary("in", e, concat());
      } else if (is_word("not") && peek(1).type == Tok::Name && peek(1).text == "in") {
        p_ += 2;
        e = binary("not in", e, concat());
      } else {
        return e;
      }
    }
  }
  ExprPtr concat() {
    ExprPtr e = additive();
    while (is_op("~")) {
      ++p_;
      e = binary("~", e, additive());
    }
    return e;
  }
  ExprPtr additive() {
    ExprPtr e = multiplicative();
    while (is_op("+") || is_op("-")) {
      const std::string op = t_[p_++].text;
      e = binary(op, e, multiplicative());
    }
    return e;
  }
  ExprPtr multiplicative() {
    ExprPtr e = power();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const std::string op = t_[p_++].text;
      e = binary(op, e, power());
    }
    return e;
  }
  ExprPtr power() {
    ExprPtr e = unary();
    while (is_op("**")) {
      ++p_;
      e = binary("**", e, unary());
    }
    return e;
  }
  ExprPtr unary() {
    if (is_op("-") || is_op("+")) {
      const auto nesting = level();
      auto e = std::make_shared<Expr>(Expr{Expr::Unary});
      e->name = t_[p_++].text;
      e->args = {unary()};
      return sealed(e);
    }
    return postfix(primary());
  }
  void call_args(Expr& e) {
    expect_op("(");
    while (!is_op(")")) {
      if (peek().type == Tok::Name && peek(1).type == Tok::Op && peek(1).text == "=") {
        const std::string key = name();
        ++p_;
        e.kwargs.emplace_back(key, conditional());
      } else {
        e.args.push_back(conditional());
      }
      if (!is_op(")")) expect_op(",");
    }
    ++p_;
  }
  ExprPtr postfix(ExprPtr e) {
    for (;;) {
      if (is_op(".")) {
        ++p_;
        auto a = std::make_shared<Expr>(Expr{Expr::Attr});
        a->name = name();
        a->args = {e};
        e = sealed(a);
      } else if (is_op("[")) {
        ++p_;
        ExprPtr lo, hi, step;
        if (!is_op(":")) lo = conditional();
        if (is_op(":")) {
          ++p_;
          if (!is_op("]") && !is_op(":")) hi = conditional();
          if (is_op(":")) {
            ++p_;
            if (!is_op("]")) step = conditional();
          }
          auto s = std::make_shared<Expr>(Expr{Expr::Slice});
          s->args = {e, lo, hi, step};
          e = sealed(s);
        } else {
          auto it = std::make_shared<Expr>(Expr{Expr::Item});
          it->args = {e, lo};
          e = sealed(it);
        }
        expect_op("]");
      } else if (is_op("(")) {
        auto c = std::make_shared<Expr>(Expr{Expr::Call});
        c->args = {e};
        call_args(*c);
        e = sealed(c);
      } else if (is_op("|")) {
        ++p_;
        auto f = std::make_shared<Expr>(Expr{Expr::Filter});
        f->name = name();
        f->args = {e};
        if (is_op("(")) call_args(*f);
        e = sealed(f);
      } else if (is_word("is")) {
        ++p_;
        auto t = std::make_shared<Expr>(Expr{Expr::Test});
        if (is_word("not")) {
          ++p_;
          t->negate = true;
        }
        t->name = name();
        t->args = {e};
        if (is_op("(")) call_args(*t);
        else if (peek().type == Tok::Number || peek().type == Tok::String) t->args.push_back(primary());
        e = sealed(t);
      } else {
        return e;
      }
    }
  }
  ExprPtr primary() {
    const Tok tok = peek();
    if (tok.type == Tok::Number || tok.type == Tok::String) {
      ++p_;
      auto e = std::make_shared<Expr>(Expr{Expr::Literal});
      e->literal = tok.value;
      // Adjacent string literals concatenate, as in Python.
      while (tok.type == Tok::String && peek().type == Tok::String) e->literal = e->literal.get<std::string>() + t_[p_++].text;
      return e;
    }
    if (tok.type == Tok::Name) {
      ++p_;
      auto e = std::make_shared<Expr>(Expr{Expr::Literal});
      if (tok.text == "true" || tok.text == "True") e->literal = true;
      else if (tok.text == "false" || tok.text == "False") e->literal = false;
      else if (tok.text == "none" || tok.text == "None") e->literal = nullptr;
      else {
        e->kind = Expr::Name;
        e->name = tok.text;
      }
      return e;
    }
    if (is_op("(")) {
      ++p_;
      ExprPtr e = conditional();
      expect_op(")");
      return e;
    }
    if (is_op("[")) {
      ++p_;
      auto e = std::make_shared<Expr>(Expr{Expr::List});
      while (!is_op("]")) {
        e->args.push_back(conditional());
        if (!is_op("]")) expect_op(",");
      }
      ++p_;
      return sealed(e);
    }
    if (is_op("{")) {
      ++p_;
      auto e = std::make_shared<Expr>(Expr{Expr::Dict});
      while (!is_op("}")) {
        e->args.push_back(conditional());
        expect_op(":");
        e->args.push_back(conditional());
        if (!is_op("}")) expect_op(",");
      }
      ++p_;
      return sealed(e);
    }
    fail("unexpected '" + tok.text + "' in '" + src_ + "'");
  }

  std::vector<Tok> t_;
  std::string src_;
  size_t p_ = 0;
  int depth_ = 0;
};

}  // namespace

// ---- statements ------------------------------------------------------------------------------------

struct JinjaTemplate::Node {
  enum Kind { Block, Text, Output, If, For, Set } kind = Block;
  std::string text;
  ExprPtr expr, filter;
  std::vector<std::pair<ExprPtr, std::vector<std::shared_ptr<Node>>>> branches;
  std::vector<std::shared_ptr<Node>> body, else_body;
  std::vector<std::string> vars;  // for: loop variables; set: name [, attribute]
};

namespace {

using Node = JinjaTemplate::Node;
using NodePtr = std::shared_ptr<Node>;

struct Segment {
  enum Type { Text, Expression, Statement } type;
  std::string content;
  size_t offset;
};

// Splits the source into text and tags with jinja2's whitespace control and the environment's
// trim_blocks, lstrip_blocks and keep_trailing_newline.
std::vector<Segment> segments(std::string src, const JinjaOptions& opt) {
  if (!opt.keep_trailing_newline) {
    if (src.size() >= 2 && src.compare(src.size() - 2, 2, "\r\n") == 0) src.resize(src.size() - 2);
    else if (!src.empty() && src.back() == '\n') src.pop_back();
  }
  std::vector<Segment> out;
  size_t i = 0;
  bool strip_next = false, trim_next_newline = false;
  while (i <= src.size()) {
    size_t open = src.find('{', i);
    while (open != std::string::npos && open + 1 < src.size() && src[open + 1] != '{' && src[open + 1] != '%' &&
           src[open + 1] != '#')
      open = src.find('{', open + 1);
    if (open != std::string::npos && open + 1 >= src.size()) open = std::string::npos;
    std::string text = src.substr(i, open == std::string::npos ? std::string::npos : open - i);
    if (trim_next_newline) {
      if (text.rfind("\r\n", 0) == 0) text.erase(0, 2);
      else if (text.rfind('\n', 0) == 0) text.erase(0, 1);
    }
    if (strip_next) text.erase(0, text.find_first_not_of(" \t\r\n") == std::string::npos ? text.size() : text.find_first_not_of(" \t\r\n"));
    strip_next = trim_next_newline = false;
    if (open == std::string::npos) {
      if (!text.empty()) out.push_back({Segment::Text, text, i});
      break;
    }
    const char kind = src[open + 1];
    const std::string close = kind == '{' ? "}}" : kind == '%' ? "%}" : "#}";
    const size_t end = src.find(close, open + 2);
    if (end == std::string::npos) fail("unclosed tag at offset " + std::to_string(open));
    std::string inner = src.substr(open + 2, end - open - 2);
    const bool strip_before = !inner.empty() && inner.front() == '-';
    const bool keep_before = !inner.empty() && inner.front() == '+';
    // "{{-}}": one '-' is the opening marker, not also the closing one (fuzz_chat_template).
    const bool strip_after = inner.size() > (strip_before || keep_before ? 1u : 0u) && inner.back() == '-';
    if (strip_before || keep_before) inner.erase(0, 1);
    if (strip_after) inner.pop_back();
    if (strip_before) {
      const size_t last = text.find_last_not_of(" \t\r\n");
      text.erase(last == std::string::npos ? 0 : last + 1);
    } else if (opt.lstrip_blocks && kind != '{' && !keep_before) {
      const size_t nl = text.rfind('\n');
      const bool line_start = nl != std::string::npos || out.empty() ||
                              (out.back().type == Segment::Text && out.back().content.back() == '\n');
      const size_t from = nl == std::string::npos ? 0 : nl + 1;
      if (line_start && text.find_first_not_of(" \t", from) == std::string::npos) text.erase(from);
    }
    if (!text.empty()) out.push_back({Segment::Text, text, i});
    if (kind != '#') out.push_back({kind == '{' ? Segment::Expression : Segment::Statement, inner, open});
    strip_next = strip_after;
    trim_next_newline = opt.trim_blocks && kind != '{' && !strip_after;
    i = end + 2;
  }
  return out;
}

ExprPtr parse_expression(const std::string& s) {
  ExprParser p(lex(s), s);
  ExprPtr e = p.parse();
  if (!p.at_end()) fail("unexpected '" + p.peek().text + "' in '" + s + "'");
  return e;
}

class TemplateParser {
 public:
  explicit TemplateParser(std::vector<Segment> segs) : s_(std::move(segs)) {}

  // Nodes until one of `enders` (a statement keyword), which is left for the caller.
  std::vector<NodePtr> parse_until(const std::vector<std::string>& enders, std::string* ended = nullptr,
                                   std::string* rest = nullptr) {
    const NestingLevel nesting(depth_, [] { return "blocks nest deeper than " + std::to_string(kMaxNesting) + " levels"; });
    std::vector<NodePtr> nodes;
    while (i_ < s_.size()) {
      const Segment& seg = s_[i_];
      if (seg.type == Segment::Text) {
        auto n = std::make_shared<Node>();
        n->kind = Node::Text;
        n->text = seg.content;
        nodes.push_back(n);
        ++i_;
        continue;
      }
      if (seg.type == Segment::Expression) {
        auto n = std::make_shared<Node>();
        n->kind = Node::Output;
        n->expr = parse_expression(seg.content);
        nodes.push_back(n);
        ++i_;
        continue;
      }
      std::vector<Tok> toks = lex(seg.content);
      if (toks.empty() || toks[0].type != Tok::Name) fail("empty or malformed tag '{% " + seg.content + " %}'");
      const std::string kw = toks[0].text;
      const size_t after_kw = seg.content.find(kw) + kw.size();
      if (std::find(enders.begin(), enders.end(), kw) != enders.end()) {
        if (ended) *ended = kw;
        if (rest) *rest = seg.content.substr(after_kw);
        ++i_;
        return nodes;
      }
      ++i_;
      if (kw == "if") nodes.push_back(parse_if(seg.content.substr(after_kw)));
      else if (kw == "for") nodes.push_back(parse_for(seg.content.substr(after_kw)));
      else if (kw == "set") nodes.push_back(parse_set(seg.content.substr(after_kw)));
      else if (kw == "generation") {
        auto n = std::make_shared<Node>();
        n->body = parse_until({"endgeneration"});
        nodes.push_back(n);
      } else {
        fail("unsupported tag '" + kw + "'");
      }
    }
    if (!enders.empty()) fail("missing {% " + enders.back() + " %}");
    return nodes;
  }

 private:
  NodePtr parse_if(const std::string& cond) {
    auto n = std::make_shared<Node>();
    n->kind = Node::If;
    ExprPtr c = parse_expression(cond);
    for (;;) {
      std::string ended, rest;
      auto body = parse_until({"elif", "else", "endif"}, &ended, &rest);
      n->branches.emplace_back(c, std::move(body));
      if (ended == "endif") return n;
      if (ended == "else") {
        n->else_body = parse_until({"endif"});
        return n;
      }
      c = parse_expression(rest);
    }
  }
  NodePtr parse_for(const std::string& spec) {
    auto n = std::make_shared<Node>();
    n->kind = Node::For;
    ExprParser p(lex(spec), spec);
    n->vars.push_back(p.name());
    while (p.is_op(",")) {
      p.skip();
      n->vars.push_back(p.name());
    }
    if (!p.is_word("in")) fail("expected 'in' in '{% for " + spec + " %}'");
    p.skip();
    n->expr = p.parse();
    if (n->expr->kind == Expr::Cond && !n->expr->args[2]) {  // `for x in xs if cond`
      n->filter = n->expr->args[1];
      n->expr = n->expr->args[0];
    }
    if (!p.at_end()) fail("unexpected '" + p.peek().text + "' in '{% for " + spec + " %}'");
    std::string ended;
    n->body = parse_until({"else", "endfor"}, &ended);
    if (ended == "else") n->else_body = parse_until({"endfor"});
    return n;
  }
  NodePtr parse_set(const std::string& spec) {
    auto n = std::make_shared<Node>();
    n->kind = Node::Set;
    ExprParser p(lex(spec), spec);
    n->vars.push_back(p.name());
    if (p.is_op(".")) {
      p.skip();
      n->vars.push_back(p.name());
    }
    if (!p.is_op("=")) fail("block {% set %} is not supported: '{% set " + spec + " %}'");
    p.skip();
    n->expr = p.parse();
    if (!p.at_end()) fail("unexpected '" + p.peek().text + "' in '{% set " + spec + " %}'");
    return n;
  }

  std::vector<Segment> s_;
  size_t i_ = 0;
  int depth_ = 0;
};

// ---- evaluation ------------------------------------------------------------------------------------

// What one render may make: string bytes, array and object entries, and loop steps at
// kLoopStepWork each, all counted against kMaxWork. A template is code from a model folder, and
// nothing bounded it before: `'x' * 10**12` asks for a terabyte, a list grown by copying at every
// step of a loop is quadratic, loops nested three deep over range(100000) take 10^15 steps. Real
// chat templates make a few KB.
constexpr int64_t kMaxWork = int64_t(1) << 26;
constexpr int64_t kLoopStepWork = 64;
// jinja2's sandbox (transformers renders chat templates in one) refuses longer ranges: MAX_RANGE.
constexpr int64_t kMaxRange = 100000;

struct Context {
  std::vector<std::map<std::string, json>> scopes;
  std::string out;
  bool strict = false;
  int64_t work = 0;

  void charge(int64_t units) {
    if (units > kMaxWork - work)
      fail("the template made more than " + std::to_string(kMaxWork) +
           " bytes, items and loop steps (a string or list that keeps growing, or loops within loops)");
    work += units;
  }

  // StrictUndefined: an undefined value may only be tested (is defined) or defaulted.
  const Value& use(const Value& v) const {
    if (strict && v.undefined) fail("'" + (v.missing.empty() ? std::string("value") : v.missing) + "' is undefined");
    return v;
  }

  json* find(const std::string& name) {
    for (auto it = scopes.rbegin(); it != scopes.rend(); ++it)
      if (auto f = it->find(name); f != it->end()) return &f->second;
    return nullptr;
  }
};

Value eval(const Expr& e, Context& c);

// Levels of arrays and objects in v (a scalar: 0). Recursive: the values a template holds stay
// within two kMaxNesting (the context is checked as JSON text, `set` checks what it keeps).
int value_depth(const json& v) {
  if (!v.is_structured()) return 0;
  int below = 0;
  for (const json& x : v) below = std::max(below, value_depth(x));
  return below + 1;
}

std::string strip_chars(const std::string& s, const std::string& chars, bool left, bool right) {
  size_t b = 0, en = s.size();
  if (left) b = s.find_first_not_of(chars);
  if (b == std::string::npos) return "";
  if (right) en = s.find_last_not_of(chars) + 1;
  return s.substr(b, en - b);
}

// Python indexes strings by code point, not by byte.
std::vector<std::string> code_points(const std::string& s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    size_t n = 1;
    while (i + n < s.size() && (static_cast<unsigned char>(s[i + n]) & 0xC0) == 0x80) ++n;
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}

json slice(const json& v, const Value& lo, const Value& hi, const Value& st) {
  const std::vector<std::string> cps = v.is_string() ? code_points(v.get_ref<const std::string&>()) : std::vector<std::string>{};
  const int64_t n = int64_t(v.is_string() ? cps.size() : v.size());
  const int64_t step = st.undefined || st.j.is_null() ? 1 : int64_t(number(st, "slice step"));
  if (step == 0) fail("slice step cannot be zero");
  auto clamp = [&](const Value& x, int64_t dflt) {
    if (x.undefined || x.j.is_null()) return dflt;
    int64_t i = int64_t(number(x, "slice index"));
    if (i < 0) i += n;
    return step > 0 ? std::clamp<int64_t>(i, 0, n) : std::clamp<int64_t>(i, -1, n - 1);
  };
  const int64_t a = clamp(lo, step > 0 ? 0 : n - 1), b = clamp(hi, step > 0 ? n : -1);
  json out = v.is_string() ? json("") : json::array();
  for (int64_t i = a; step > 0 ? i < b : i > b; i += step) {
    if (v.is_string()) out.get_ref<std::string&>() += cps[size_t(i)];
    else out.push_back(v[size_t(i)]);
  }
  return out;
}

Value attribute(const Value& obj, const std::string& name) {
  if (obj.j.is_object()) {
    auto it = obj.j.find(name);
    if (it != obj.j.end()) return val(*it);
  }
  return undefined_value();
}

Value item(const Value& obj, const Value& key) {
  if (obj.j.is_object() && key.j.is_string()) return attribute(obj, key.j.get<std::string>());
  if ((obj.j.is_array() || obj.j.is_string()) && integral(key)) {
    const std::vector<std::string> cps = obj.j.is_string() ? code_points(obj.j.get_ref<const std::string&>()) : std::vector<std::string>{};
    const int64_t n = int64_t(obj.j.is_string() ? cps.size() : obj.j.size());
    int64_t i = int64_t(number(key, "index"));
    if (i < 0) i += n;
    if (i < 0 || i >= n) return undefined_value();
    if (obj.j.is_string()) return val(cps[size_t(i)]);
    return val(obj.j[size_t(i)]);
  }
  return undefined_value();
}

json iterable(const Value& v) {
  if (v.undefined || v.j.is_null()) return json::array();
  if (v.j.is_array()) return v.j;
  json out = json::array();
  if (v.j.is_object()) {
    for (auto it = v.j.begin(); it != v.j.end(); ++it) out.push_back(it.key());
  } else if (v.j.is_string()) {
    for (char ch : v.j.get<std::string>()) out.push_back(std::string(1, ch));
  } else {
    fail(py_repr(v.j) + " is not iterable");
  }
  return out;
}

json items_of(const json& obj) {
  json out = json::array();
  for (auto it = obj.begin(); it != obj.end(); ++it) out.push_back(json::array({it.key(), *it}));
  return out;
}

bool equal(const json& a, const json& b) {
  if (a.is_number() && b.is_number()) return a.get<double>() == b.get<double>();
  return a == b;
}

bool run_test(const std::string& name, const Value& v, const std::vector<Value>& args) {
  if (name == "defined") return !v.undefined;
  if (name == "undefined") return v.undefined;
  if (name == "none") return !v.undefined && v.j.is_null();
  if (name == "string") return v.j.is_string();
  if (name == "number") return v.j.is_number();
  if (name == "integer") return v.j.is_number_integer();
  if (name == "float") return v.j.is_number_float();
  if (name == "boolean") return v.j.is_boolean();
  if (name == "true") return v.j.is_boolean() && v.j.get<bool>();
  if (name == "false") return v.j.is_boolean() && !v.j.get<bool>();
  if (name == "mapping") return v.j.is_object();
  if (name == "sequence" || name == "iterable") return v.j.is_array() || v.j.is_string() || v.j.is_object();
  if (name == "odd" || name == "even") return (int64_t(number(v, "odd/even")) % 2 != 0) == (name == "odd");
  if (name == "eq" || name == "equalto" || name == "sameas") return !args.empty() && equal(v.j, args[0].j);
  if (name == "ne") return args.empty() || !equal(v.j, args[0].j);
  fail("unsupported test '" + name + "'");
}

Value call_method(const Value& obj, const std::string& name, const std::vector<Value>& args) {
  if (obj.j.is_string()) {
    const std::string& s = obj.j.get_ref<const std::string&>();
    const std::string ws = " \t\r\n\f\v";
    auto chars = [&] { return args.empty() || args[0].j.is_null() ? ws : py_str(args[0]); };
    if (name == "strip") return val(strip_chars(s, chars(), true, true));
    if (name == "lstrip") return val(strip_chars(s, chars(), true, false));
    if (name == "rstrip") return val(strip_chars(s, chars(), false, true));
    if (name == "upper" || name == "lower") {
      std::string r = s;
      for (char& ch : r) ch = char(name == "upper" ? std::toupper(static_cast<unsigned char>(ch)) : std::tolower(static_cast<unsigned char>(ch)));
      return val(r);
    }
    if (name == "find" || name == "index" || name == "count") {
      if (args.empty()) fail(name + "() needs an argument");
      const std::string sub = py_str(args[0]);
      if (name == "count") {
        if (sub.empty()) return val(int64_t(s.size() + 1));
        int64_t n = 0;
        for (size_t at = s.find(sub); at != std::string::npos; at = s.find(sub, at + sub.size())) ++n;
        return val(n);
      }
      const size_t at = s.find(sub);
      if (at == std::string::npos) {
        if (name == "index") fail("substring not found: " + py_repr(args[0].j) + ".index of " + py_repr(obj.j));
        return val(int64_t(-1));
      }
      size_t cps = 0;  // Python indexes code points
      for (size_t i = 0; i < at; ++i) cps += (static_cast<unsigned char>(s[i]) & 0xC0) != 0x80;
      return val(int64_t(cps));
    }
    if (name == "join") {
      std::string r;
      bool first = true;
      for (const json& x : iterable(args.empty() ? undefined_value() : args[0])) r += (first ? "" : s) + py_str(val(x)), first = false;
      return val(r);
    }
    if (name == "startswith") return val(!args.empty() && s.rfind(py_str(args[0]), 0) == 0);
    if (name == "endswith") {
      const std::string t = args.empty() ? "" : py_str(args[0]);
      return val(s.size() >= t.size() && s.compare(s.size() - t.size(), t.size(), t) == 0);
    }
    if (name == "replace" && args.size() >= 2) {
      std::string r = s, from = py_str(args[0]), to = py_str(args[1]);
      if (from.empty()) return val(r);
      for (size_t at = r.find(from); at != std::string::npos; at = r.find(from, at + to.size())) r.replace(at, from.size(), to);
      return val(r);
    }
    if (name == "split") {
      json out = json::array();
      if (args.empty() || args[0].j.is_null()) {
        size_t i = 0;
        while (true) {
          i = s.find_first_not_of(ws, i);
          if (i == std::string::npos) break;
          const size_t e = s.find_first_of(ws, i);
          out.push_back(s.substr(i, e == std::string::npos ? std::string::npos : e - i));
          if (e == std::string::npos) break;
          i = e;
        }
      } else {
        const std::string sep = py_str(args[0]);
        if (sep.empty()) fail("split: empty separator");
        size_t i = 0;
        for (size_t at = s.find(sep); at != std::string::npos; at = s.find(sep, i)) {
          out.push_back(s.substr(i, at - i));
          i = at + sep.size();
        }
        out.push_back(s.substr(i));
      }
      return val(out);
    }
    if (name == "title" || name == "capitalize") {
      std::string r = s;
      bool start = true;
      for (size_t i = 0; i < r.size(); ++i) {
        const bool alpha = std::isalpha(static_cast<unsigned char>(r[i]));
        r[i] = char(start && alpha ? std::toupper(static_cast<unsigned char>(r[i])) : std::tolower(static_cast<unsigned char>(r[i])));
        start = name == "title" ? !alpha : false;
      }
      return val(r);
    }
  }
  if (obj.j.is_array() && (name == "index" || name == "count")) {
    if (args.empty()) fail(name + "() needs an argument");
    int64_t n = 0;
    for (size_t i = 0; i < obj.j.size(); ++i)
      if (equal(obj.j[i], args[0].j)) {
        if (name == "index") return val(int64_t(i));
        ++n;
      }
    if (name == "index") fail(py_repr(args[0].j) + " is not in list");
    return val(n);
  }
  if (obj.j.is_object()) {
    if (name == "items") return val(items_of(obj.j));
    if (name == "keys" || name == "values") {
      json out = json::array();
      for (auto it = obj.j.begin(); it != obj.j.end(); ++it) out.push_back(name == "keys" ? json(it.key()) : *it);
      return val(out);
    }
    if (name == "get") {
      if (args.empty()) fail("get() needs a key");
      Value v = attribute(obj, py_str(args[0]));
      return v.undefined ? (args.size() > 1 ? args[1] : val(nullptr)) : v;
    }
  }
  fail("unsupported method '" + name + "' on " + py_repr(obj.j));
}

Value apply_filter(const std::string& name, const Value& v, const std::vector<Value>& args,
                   const std::vector<std::pair<std::string, Value>>& kwargs) {
  auto kw = [&](const std::string& key, size_t pos) -> const Value* {
    for (const auto& [k, x] : kwargs)
      if (k == key) return &x;
    return pos < args.size() ? &args[pos] : nullptr;
  };
  if (name == "trim") return val(strip_chars(py_str(v), args.empty() ? " \t\r\n\f\v" : py_str(args[0]), true, true));
  if (name == "length" || name == "count") {
    if (v.j.is_string()) return val(int64_t(code_points(v.j.get_ref<const std::string&>()).size()));
    return val(int64_t(v.undefined ? 0 : v.j.size()));
  }
  if (name == "upper" || name == "lower" || name == "title" || name == "capitalize") return call_method(val(py_str(v)), name, {});
  if (name == "string") return val(py_str(v));
  if (name == "int") {
    if (v.j.is_string()) {
      try {
        return val(int64_t(std::stoll(v.j.get<std::string>())));
      } catch (const std::exception&) {
        return val(int64_t(0));
      }
    }
    if (v.j.is_number_integer() || v.j.is_boolean()) return val(int64_t(v.j.is_boolean() ? v.j.get<bool>() : v.j.get<int64_t>()));
    const double d = v.j.is_number() ? v.j.get<double>() : 0;
    if (std::isnan(d)) return val(int64_t(0));  // int(nan) is a ValueError: jinja2's default
    if (!(std::fabs(d) < std::ldexp(1.0, 63))) fail("int: " + py_repr(v.j) + " is beyond 64 bits");
    return val(int64_t(d));
  }
  if (name == "float") {
    if (v.j.is_number()) return val(v.j.get<double>());
    if (!v.j.is_string()) return val(0.0);
    // Python's float(): the whole text (spaces around it allowed), else jinja2's default 0.0.
    const std::string& text = v.j.get_ref<const std::string&>();
    char* end = nullptr;
    const double d = std::strtod(text.c_str(), &end);
    while (end && *end && std::isspace(static_cast<unsigned char>(*end))) ++end;
    return val(end != text.c_str() && end && *end == '\0' ? d : 0.0);
  }
  if (name == "abs") return val(number_json(std::fabs(number(v, "abs")), integral(v)));
  if (name == "tojson") {
    const Value* indent = kw("indent", 0);
    std::string out;
    const int64_t spaces = indent && indent->j.is_number() ? indent->j.get<int64_t>() : -1;
    if (spaces > 1000) fail("tojson indent above 1000");  // each line's spaces are made before they count
    py_json(v.j, out, int(spaces), 0);
    return val(out);
  }
  if (name == "join") {
    const std::string sep = args.empty() ? "" : py_str(args[0]);
    std::string out;
    const json items = iterable(v);
    for (size_t i = 0; i < items.size(); ++i) out += (i ? sep : "") + py_str(val(items[i]));
    return val(out);
  }
  if (name == "first" || name == "last") {
    const json items = iterable(v);
    if (items.empty()) return undefined_value();
    return val(name == "first" ? items.front() : items.back());
  }
  if (name == "default" || name == "d") {
    const bool boolean = args.size() > 1 && truthy(args[1]);
    if (v.undefined || (boolean && !truthy(v))) return args.empty() ? val("") : args[0];
    return v;
  }
  if (name == "items") return val(v.j.is_object() ? items_of(v.j) : json::array());
  if (name == "list") return val(iterable(v));
  if (name == "reverse") {
    if (v.j.is_string()) {
      std::string s = v.j.get<std::string>();
      std::reverse(s.begin(), s.end());
      return val(s);
    }
    json items = iterable(v);
    std::reverse(items.begin(), items.end());
    return val(items);
  }
  if (name == "replace") return call_method(val(py_str(v)), "replace", args);
  if (name == "regex_replace") {  // lm-eval's filter: re.sub(pattern, repl, value, count)
    if (args.size() < 2) fail("regex_replace needs a pattern and a replacement");
    const PyRegex re(py_str(args[0]));
    return val(re.sub(py_str(v), py_str(args[1]), args.size() > 2 ? int64_t(number(args[2], "regex_replace count")) : 0));
  }
  if (name == "safe" || name == "e" || name == "escape") return v;
  if (name == "round") {
    const double p = args.empty() ? 0 : number(args[0], "round");
    const double f = std::pow(10.0, p);
    return val(std::round(number(v, "round") * f) / f);
  }
  if (name == "selectattr" || name == "rejectattr") {
    if (args.empty()) fail(name + " needs an attribute");
    const std::string attr = py_str(args[0]);
    json out = json::array();
    for (const json& x : iterable(v)) {
      Value a = attribute(val(x), attr);
      bool keep;
      if (args.size() > 1) keep = run_test(py_str(args[1]), a, std::vector<Value>(args.begin() + 2, args.end()));
      else keep = truthy(a);
      if (keep == (name == "selectattr")) out.push_back(x);
    }
    return val(out);
  }
  if (name == "map") {
    const Value* attr = kw("attribute", size_t(-1));
    json out = json::array();
    for (const json& x : iterable(v)) {
      if (attr) {
        Value a = attribute(val(x), py_str(*attr));
        out.push_back(a.undefined ? json(nullptr) : a.j);
      } else if (!args.empty()) {
        out.push_back(apply_filter(py_str(args[0]), val(x), std::vector<Value>(args.begin() + 1, args.end()), {}).j);
      } else {
        fail("map needs a filter name or attribute=");
      }
    }
    return val(out);
  }
  fail("unsupported filter '" + name + "'");
}

Value call(const Expr& e, Context& c) {
  std::vector<Value> args;
  for (size_t i = 1; i < e.args.size(); ++i) args.push_back(eval(*e.args[i], c));
  const Expr& callee = *e.args[0];
  if (callee.kind == Expr::Attr) return call_method(c.use(eval(*callee.args[0], c)), callee.name, args);
  if (callee.kind != Expr::Name) fail("this expression can't be called");
  const std::string& fn = callee.name;
  if (fn == "raise_exception") fail(args.empty() ? "raise_exception()" : py_str(args[0]));
  if (fn == "namespace") {
    json ns = json::object();
    for (const auto& [k, x] : e.kwargs) ns[k] = eval(*x, c).j;
    return val(ns);
  }
  if (fn == "range") {
    // Python's range takes integers only (range(1.5) and range(1e300) are TypeErrors in jinja2).
    auto integer = [](const Value& v) {
      if (!integral(v)) fail("range() takes integers, got " + py_repr(v.j));
      return v.j.is_boolean() ? int64_t(v.j.get<bool>()) : v.j.get<int64_t>();
    };
    int64_t a = 0, b = 0, step = 1;
    if (args.size() == 1) b = integer(args[0]);
    else if (args.size() >= 2) a = integer(args[0]), b = integer(args[1]);
    if (args.size() == 3) step = integer(args[2]);
    if (step == 0) fail("range() step must not be zero");
    // Its length in unsigned arithmetic: b - a may not fit in int64 (range(-9e18, 9e18) overflowed it).
    const uint64_t span = step > 0 ? (b > a ? uint64_t(b) - uint64_t(a) : 0) : (a > b ? uint64_t(a) - uint64_t(b) : 0);
    const uint64_t stride = step > 0 ? uint64_t(step) : uint64_t(0) - uint64_t(step);
    const uint64_t count = span == 0 ? 0 : (span - 1) / stride + 1;
    if (count > uint64_t(kMaxRange))
      fail("range too big: the sandbox blocks ranges larger than " + std::to_string(kMaxRange) + " (jinja2's MAX_RANGE)");
    json out = json::array();
    for (uint64_t k = 0; k < count; ++k) out.push_back(int64_t(uint64_t(a) + k * uint64_t(step)));  // each fits
    return val(out);
  }
  if (fn == "strftime_now") {
    const std::time_t now = std::time(nullptr);
    char buf[256];
    std::tm tm{};
    localtime_r(&now, &tm);
    const size_t n = std::strftime(buf, sizeof buf, args.empty() ? "" : py_str(args[0]).c_str(), &tm);
    return val(std::string(buf, n));
  }
  fail("unknown function '" + fn + "'");
}

Value eval_node(const Expr& e, Context& c);

// Every value an expression makes is charged to the render's work (Context::charge).
Value eval(const Expr& e, Context& c) {
  Value v = eval_node(e, c);
  if (v.j.is_string()) c.charge(int64_t(v.j.get_ref<const std::string&>().size()));
  else if (v.j.is_structured()) c.charge(int64_t(v.j.size()));
  return v;
}

Value eval_node(const Expr& e, Context& c) {
  switch (e.kind) {
    case Expr::Literal:
      return val(e.literal);
    case Expr::Name: {
      if (json* v = c.find(e.name)) return val(*v);
      return undefined_value(e.name);
    }
    case Expr::List: {
      json out = json::array();
      for (const auto& a : e.args) out.push_back(eval(*a, c).j);
      return val(out);
    }
    case Expr::Dict: {
      json out = json::object();
      for (size_t i = 0; i + 1 < e.args.size(); i += 2) out[py_str(eval(*e.args[i], c))] = eval(*e.args[i + 1], c).j;
      return val(out);
    }
    case Expr::Attr: {
      Value v = attribute(c.use(eval(*e.args[0], c)), e.name);
      if (v.undefined) v.missing = e.name;
      return v;
    }
    case Expr::Item: {
      Value v = item(c.use(eval(*e.args[0], c)), c.use(eval(*e.args[1], c)));
      if (v.undefined) v.missing = "item";
      return v;
    }
    case Expr::Slice: {
      const Value v = c.use(eval(*e.args[0], c));
      auto opt = [&](const ExprPtr& p) { return p ? eval(*p, c) : undefined_value(); };
      if (!v.j.is_array() && !v.j.is_string()) fail("slicing " + py_repr(v.j));
      return val(slice(v.j, opt(e.args[1]), opt(e.args[2]), opt(e.args[3])));
    }
    case Expr::Call:
      return call(e, c);
    case Expr::Filter: {
      std::vector<Value> args;
      for (size_t i = 1; i < e.args.size(); ++i) args.push_back(eval(*e.args[i], c));
      std::vector<std::pair<std::string, Value>> kwargs;
      for (const auto& [k, x] : e.kwargs) kwargs.emplace_back(k, eval(*x, c));
      const Value v = eval(*e.args[0], c);
      return apply_filter(e.name, e.name == "default" || e.name == "d" ? v : c.use(v), args, kwargs);
    }
    case Expr::Test: {
      std::vector<Value> args;
      for (size_t i = 1; i < e.args.size(); ++i) args.push_back(eval(*e.args[i], c));
      return val(run_test(e.name, eval(*e.args[0], c), args) != e.negate);
    }
    case Expr::Unary: {
      const Value v = c.use(eval(*e.args[0], c));
      if (e.name == "not") return val(!truthy(v));
      const double d = number(v, "unary minus");
      return val(number_json(e.name == "-" ? -d : d, integral(v)));
    }
    case Expr::Cond:
      if (truthy(eval(*e.args[1], c))) return eval(*e.args[0], c);
      return e.args[2] ? eval(*e.args[2], c) : undefined_value();
    case Expr::Binary:
      break;
  }
  const std::string& op = e.name;
  if (op == "and") {
    Value a = eval(*e.args[0], c);
    return truthy(a) ? eval(*e.args[1], c) : a;
  }
  if (op == "or") {
    Value a = eval(*e.args[0], c);
    return truthy(a) ? a : eval(*e.args[1], c);
  }
  const Value a = c.use(eval(*e.args[0], c)), b = c.use(eval(*e.args[1], c));
  if (op == "~") return val(py_str(a) + py_str(b));
  if (op == "==") return val(equal(a.j, b.j) && a.undefined == b.undefined);
  if (op == "!=") return val(!(equal(a.j, b.j) && a.undefined == b.undefined));
  if (op == "in" || op == "not in") {
    bool found = false;
    if (b.j.is_string()) found = b.j.get_ref<const std::string&>().find(py_str(a)) != std::string::npos;
    else if (b.j.is_object()) found = a.j.is_string() && b.j.contains(a.j.get<std::string>());
    else if (b.j.is_array()) found = std::any_of(b.j.begin(), b.j.end(), [&](const json& x) { return equal(x, a.j); });
    return val(found == (op == "in"));
  }
  if (op == "+" && a.j.is_string() && b.j.is_string()) return val(a.j.get<std::string>() + b.j.get<std::string>());
  if (op == "+" && a.j.is_array() && b.j.is_array()) {
    json out = a.j;
    for (const json& x : b.j) out.push_back(x);
    return val(out);
  }
  if (op == "<" || op == ">" || op == "<=" || op == ">=") {
    int cmp;
    if (a.j.is_string() && b.j.is_string()) cmp = a.j.get<std::string>().compare(b.j.get<std::string>());
    else {
      const double x = number(a, op.c_str()), y = number(b, op.c_str());
      cmp = x < y ? -1 : x > y ? 1 : 0;
    }
    return val(op == "<" ? cmp < 0 : op == ">" ? cmp > 0 : op == "<=" ? cmp <= 0 : cmp >= 0);
  }
  if (op == "*" && a.j.is_string() && integral(b)) {
    const std::string& piece = a.j.get_ref<const std::string&>();
    const int64_t times = b.j.is_boolean() ? int64_t(b.j.get<bool>()) : b.j.get<int64_t>();
    if (times > 0 && !piece.empty())  // charged before it is made
      c.charge(times > kMaxWork / int64_t(piece.size()) ? kMaxWork + 1 : times * int64_t(piece.size()));
    std::string out;
    for (int64_t i = 0; i < times; ++i) out += piece;
    return val(out);
  }
  const double x = number(a, op.c_str()), y = number(b, op.c_str());
  const bool ints = integral(a) && integral(b);
  if (op == "+") return val(number_json(x + y, ints));
  if (op == "-") return val(number_json(x - y, ints));
  if (op == "*") return val(number_json(x * y, ints));
  if (op == "/") {
    if (y == 0) fail("division by zero");
    return val(x / y);
  }
  if (op == "//" || op == "%") {
    if (y == 0) fail("division by zero");
    const double q = std::floor(x / y);
    return val(number_json(op == "//" ? q : x - q * y, ints));
  }
  if (op == "**") return val(number_json(std::pow(x, y), ints && y >= 0));
  fail("unsupported operator '" + op + "'");
}

void render_nodes(const std::vector<NodePtr>& nodes, Context& c);

void render_node(const Node& n, Context& c) {
  switch (n.kind) {
    case Node::Text:
      c.out += n.text;
      return;
    case Node::Output:
      c.out += py_str(c.use(eval(*n.expr, c)));
      return;
    case Node::Block:
      render_nodes(n.body, c);
      return;
    case Node::If:
      for (const auto& [cond, body] : n.branches)
        if (truthy(eval(*cond, c))) {
          render_nodes(body, c);
          return;
        }
      render_nodes(n.else_body, c);
      return;
    case Node::Set: {
      json v = eval(*n.expr, c).j;
      // What a template keeps may not grow deeper at every loop step ({% set ns.x = [ns.x] %}):
      // the values an expression reads then stay within two kMaxNesting.
      if (value_depth(v) > kMaxNesting)
        fail("{% set " + n.vars[0] + " %} would keep a value nested deeper than " + std::to_string(kMaxNesting) + " levels");
      if (n.vars.size() == 1) {
        c.scopes.back()[n.vars[0]] = std::move(v);
      } else {
        json* ns = c.find(n.vars[0]);
        if (!ns || !ns->is_object()) fail("'" + n.vars[0] + "' is not a namespace");
        (*ns)[n.vars[1]] = std::move(v);
      }
      return;
    }
    case Node::For: {
      const json all = iterable(c.use(eval(*n.expr, c)));
      std::vector<json> items;
      for (const json& x : all) {
        if (n.filter) {
          c.scopes.emplace_back();
          c.scopes.back()[n.vars[0]] = x;
          const bool keep = truthy(eval(*n.filter, c));
          c.scopes.pop_back();
          if (!keep) continue;
        }
        items.push_back(x);
      }
      if (items.empty()) {
        render_nodes(n.else_body, c);
        return;
      }
      const int64_t len = int64_t(items.size());
      for (int64_t i = 0; i < len; ++i) {
        c.scopes.emplace_back();
        auto& scope = c.scopes.back();
        if (n.vars.size() == 1) {
          scope[n.vars[0]] = items[size_t(i)];
        } else {
          const json& x = items[size_t(i)];
          if (!x.is_array() || x.size() != n.vars.size()) fail("can't unpack " + py_repr(x) + " into the loop variables");
          for (size_t k = 0; k < n.vars.size(); ++k) scope[n.vars[k]] = x[k];
        }
        c.charge(kLoopStepWork);
        scope["loop"] = json{{"index", i + 1},          {"index0", i},
                             {"revindex", len - i},     {"revindex0", len - i - 1},
                             {"first", i == 0},         {"last", i == len - 1},
                             {"length", len},
                             {"previtem", i > 0 ? items[size_t(i - 1)] : json(nullptr)},
                             {"nextitem", i + 1 < len ? items[size_t(i + 1)] : json(nullptr)}};
        render_nodes(n.body, c);
        c.scopes.pop_back();
      }
      return;
    }
  }
}

void render_nodes(const std::vector<NodePtr>& nodes, Context& c) {
  for (const NodePtr& n : nodes) render_node(*n, c);
}

}  // namespace

JinjaTemplate::JinjaTemplate(const std::string& source, JinjaOptions options) : options_(std::move(options)) {
  g_template_name = &options_.what;
  struct Reset {
    ~Reset() { g_template_name = nullptr; }
  } reset;
  TemplateParser p(segments(source, options_));
  auto root = std::make_shared<Node>();
  root->body = p.parse_until({});
  root_ = root;
}

JinjaTemplate::~JinjaTemplate() = default;
JinjaTemplate::JinjaTemplate(JinjaTemplate&&) noexcept = default;
JinjaTemplate& JinjaTemplate::operator=(JinjaTemplate&&) noexcept = default;

std::string JinjaTemplate::render(const std::string& context_json) const {
  g_template_name = &options_.what;
  struct Reset {
    ~Reset() { g_template_name = nullptr; }
  } reset;
  if (io::json_depth(context_json) > io::kMaxJsonDepth)
    fail("the context nests deeper than " + std::to_string(io::kMaxJsonDepth) + " levels");
  const json ctx = json::parse(context_json, nullptr, false);
  if (ctx.is_discarded() || !ctx.is_object()) fail("the context must be a JSON object");
  Context c;
  c.strict = options_.strict_undefined;
  c.scopes.emplace_back();
  for (auto it = ctx.begin(); it != ctx.end(); ++it) c.scopes.back()[it.key()] = *it;
  try {
    render_node(*root_, c);
  } catch (const json::exception& e) {  // an operation on a value of a type it does not take
    fail(std::string("a value of the wrong type: ") + e.what());
  }
  return c.out;
}

}  // namespace foundry::text
