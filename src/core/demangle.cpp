#include "core/demangle.h"

#include <cxxabi.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <cstdlib>
#include <string_view>
#include <vector>

namespace gpuscope {
namespace {

// Neither libstdc++'s demangler nor any Debian library knows NVIDIA's extended-lambda
// manglings, and NVIDIA's own (libcufilt) is not packaged: this reads just enough of the
// Itanium grammar to name such kernels.
class Reader {
 public:
  explicit Reader(std::string_view s) : s_(s) {}

  // `_Z N [quals] <components> [I args E] ...` or `_Z <ident> ...`: the qualified name and
  // the position just after it.
  bool qualified_name(std::string& out) {
    if (!take("_Z")) return false;
    if (take('N')) {
      while (peek() == 'K' || peek() == 'V' || peek() == 'r') i_++;
      std::string id;
      while (!eof() && peek() != 'I' && peek() != 'E') {
        if (peek() == 'S' && at(1) == 't') {
          i_ += 2;
          append(out, "std");
          continue;
        }
        if (!ident(id)) return false;
        append(out, id);
        prefixes_.push_back(out);
      }
      return !out.empty();
    }
    std::string id;
    if (!ident(id)) return false;
    out = id;
    return true;
  }

  // The template arguments that read plainly (integer and bool literals, builtin types),
  // then, for each NVIDIA lambda wrapper anywhere in the rest, the function it names.
  std::string template_args() {
    if (!take('I')) return "";
    std::vector<std::string> args;
    bool more = false;
    while (!eof() && peek() != 'E') {
      std::string a;
      if (!simple_arg(a)) {
        more = true;
        break;
      }
      args.push_back(a);
    }
    if (more) {
      for (size_t p = s_.find("Unv", i_); p != std::string_view::npos; p = s_.find("Unv", p + 3)) {
        std::string fn = wrapped_function(p);
        std::string w = s_.substr(p, 6) == "Unvhdl" ? "__nv_hdl_wrapper_t" : "__nv_dl_wrapper_t";
        args.push_back(w + (fn.empty() ? "<…>" : "<…&" + fn + "…>"));
      }
      args.push_back("…");
    }
    std::string r = "<";
    for (size_t k = 0; k < args.size(); k++) r += (k ? ", " : "") + args[k];
    return r + ">";
  }

 private:
  bool eof() const { return i_ >= s_.size(); }
  char peek() const { return eof() ? 0 : s_[i_]; }
  char at(size_t k) const { return i_ + k < s_.size() ? s_[i_ + k] : 0; }
  bool take(char c) {
    if (peek() != c) return false;
    i_++;
    return true;
  }
  bool take(std::string_view t) {
    if (i_ > s_.size() || s_.substr(i_, t.size()) != t) return false;
    i_ += t.size();
    return true;
  }
  static void append(std::string& q, const std::string& id) { q += (q.empty() ? "" : "::") + id; }

  bool number(size_t& n) {
    size_t st = i_;
    n = 0;
    // Saturates rather than wraps: a length past the end must stay past the end.
    while (!eof() && isdigit(static_cast<unsigned char>(peek())))
      n = std::min<size_t>(n * 10 + (s_[i_++] - '0'), s_.size() + 1);
    return i_ > st;
  }
  bool ident(std::string& out) {
    size_t st = i_, n;
    if (!number(n) || n > s_.size() - i_) {
      i_ = st;
      return false;
    }
    out = std::string(s_.substr(i_, n));
    i_ += n;
    return true;
  }

  static const char* builtin(char c) {
    switch (c) {
      case 'v': return "void";
      case 'b': return "bool";
      case 'c': return "char";
      case 'a': return "signed char";
      case 'h': return "unsigned char";
      case 's': return "short";
      case 't': return "unsigned short";
      case 'i': return "int";
      case 'j': return "unsigned int";
      case 'l': return "long";
      case 'm': return "unsigned long";
      case 'x': return "long long";
      case 'y': return "unsigned long long";
      case 'f': return "float";
      case 'd': return "double";
      default: return nullptr;
    }
  }

  bool simple_arg(std::string& out) {
    size_t st = i_;
    if (take('L')) {
      char t = peek();
      if (!builtin(t) || t == 'v') return (i_ = st), false;
      i_++;
      bool neg = take('n');
      size_t v;
      if (!number(v) || !take('E')) return (i_ = st), false;
      if (t == 'b')
        out = v ? "true" : "false";
      else
        out = (neg ? "-" : "") + std::to_string(v) + (t == 'j' ? "u" : t == 'm' ? "ul" : t == 'l' ? "l" : "");
      return true;
    }
    if (const char* b = builtin(peek())) {
      i_++;
      out = b;
      return true;
    }
    return false;
  }

  // Skips one balanced stretch starting at an opener (N, I, F, Z, L...) up to its E.
  bool skip_balanced() {
    std::vector<char> open;
    do {
      if (eof()) return false;
      char c = peek();
      if (isdigit(static_cast<unsigned char>(c))) {
        std::string id;
        if (!ident(id)) return false;
      } else if (c == 'U' && s_.substr(i_, 6) == "Unvhdl") {
        if (!skip_hdl(nullptr)) return false;
      } else if (c == 'U' && at(1) == 'l') {
        open.push_back('l'), i_ += 2;
      } else if (c == 'S' || c == 'T') {
        i_++;
        if (c == 'S' && peek() && strchr("tabsiod", peek()))
          i_++;
        else {
          while (!eof() && peek() != '_') i_++;
          i_++;
        }
      } else if (c == 'L') {
        i_++;
        if (builtin(peek())) {
          while (!eof() && peek() != 'E') i_++;
          i_++;
        } else {
          open.push_back('L');
        }
      } else if (c == 'D') {
        i_ += 2;
      } else if (c == 'N' || c == 'I' || c == 'F' || c == 'Z') {
        open.push_back(c), i_++;
      } else if (c == 'E') {
        if (open.empty()) return false;
        char o = open.back();
        open.pop_back(), i_++;
        if (o == 'l') {  // a closure: E [number] _
          size_t n;
          number(n);
          if (!take('_')) return false;
        }
      } else {
        i_++;
      }
    } while (!open.empty());
    return true;
  }

  // One <type>, enough of the grammar for what lambda signatures and tags hold.
  bool skip_type() {
    char c = peek();
    if (!c) return false;
    if (strchr("PROKVr", c)) return i_++, skip_type();
    if (c == 'D') return i_ += 2, true;
    if (builtin(c) || strchr("nowegz", c)) return i_++, true;
    if (c == 'N' || c == 'F' || c == 'Z') return skip_balanced();
    if (c == 'A') {
      size_t n;
      i_++;
      number(n);
      return take('_') && skip_type();
    }
    if (c == 'M') return i_++, skip_type() && skip_type();
    if (c == 'U' && s_.substr(i_, 6) == "Unvhdl") return skip_hdl(nullptr);
    if (c == 'L') i_++, c = peek();
    if (c == 'S' || c == 'T') {
      i_++;
      if (c == 'S' && peek() && strchr("tabsiod", peek())) {
        i_++;
        std::string id;
        if (isdigit(static_cast<unsigned char>(peek())) && !ident(id)) return false;
      } else {
        while (!eof() && peek() != '_') i_++;
        if (!take('_')) return false;
      }
    } else {
      std::string id;
      if (!ident(id)) return false;
    }
    return peek() == 'I' ? skip_balanced() : true;
  }

 public:
  // `Unvhdl <mutable>_<conv>_<nothrow>_<captures>_ <tag's function type> <tag's function>
  // <tag number>_ <return type> <parameters> E <capture types>`: the closure of a
  // __host__ __device__ lambda. With `params` it gives the parameters' mangling.
  bool skip_hdl(std::string* params) {
    if (!take("Unvhdl")) return false;
    size_t flags[4];
    for (auto& f : flags)
      if (!number(f) || !take('_')) return false;
    size_t tag;
    if (!skip_type() || !skip_type() || !number(tag) || !take('_') || !skip_type()) return false;
    size_t p = i_;
    while (!eof() && peek() != 'E')
      if (!skip_type()) return false;
    if (i_ > s_.size()) return false;  // a last `D?` stepped past the end
    if (params) *params = std::string(s_.substr(p, i_ - p));
    if (!take('E')) return false;
    for (size_t k = 0; k < flags[3]; k++)
      if (!skip_type()) return false;
    return true;
  }

  // NVIDIA's demangler shows such a closure as the lambda it wraps, `{lambda(float)#1}`,
  // which is what the standard closure mangling `Ul <params> E _` reads as.
  static std::string standard_closures(std::string_view s) {
    std::string out;
    size_t from = 0;
    for (size_t p = s.find("Unvhdl"); p != std::string_view::npos; p = s.find("Unvhdl", from)) {
      Reader r(s);
      r.i_ = p;
      std::string params;
      if (!r.skip_hdl(&params)) return "";
      out.append(s.substr(from, p - from)).append("Ul").append(params.empty() ? "v" : params).append("E_");
      from = std::min(r.i_, s.size());
    }
    return out.append(s.substr(from));
  }

 private:
  // At `Unvhdl<flags>_ <function type> <name>` (or Unvdl): the named function, qualified
  // where its prefix is one of the kernel's own.
  std::string wrapped_function(size_t p) {
    size_t save = i_;
    i_ = p + (s_.substr(p, 6) == "Unvhdl" ? 6 : s_.substr(p, 5) == "Unvdl" ? 5 : 3);
    size_t n;
    while (number(n) && take('_')) {
    }
    std::string fn;
    if (take('P') || take('M')) {
      if (s_[i_ - 1] == 'M') skip_substitution_or_type();
      if (peek() == 'F' && skip_balanced()) fn = function_name();
    }
    i_ = save;
    return fn;
  }

  void skip_substitution_or_type() {
    if (take('S')) {
      while (!eof() && peek() != '_') i_++;
      i_++;
    } else if (peek() == 'N') {
      skip_balanced();
    } else {
      std::string id;
      ident(id);
    }
  }

  std::string function_name() {
    std::string q;
    if (take('N')) {
      std::string id;
      while (!eof() && peek() != 'E') {
        if (peek() == 'S') {
          i_++;
          size_t idx = 0;
          if (!take('_')) {
            size_t v = 0;
            while (!eof() && peek() != '_') {
              char c = s_[i_++];
              v = v * 36 + (isdigit(static_cast<unsigned char>(c)) ? c - '0' : c - 'A' + 10);
            }
            i_++;
            idx = v + 1;
          }
          q = idx < prefixes_.size() ? prefixes_[idx] : "";
        } else if (ident(id)) {
          append(q, id);
        } else {
          return "";  // an operator name or something else not worth reading
        }
      }
      return q;
    }
    std::string id;
    take('L');
    return ident(id) ? id : "";
  }

  std::string_view s_;
  size_t i_ = 0;
  std::vector<std::string> prefixes_;  // substitution candidates S_, S0_, ... of the leading name
};

}  // namespace

std::string demangle(const std::string& mangled) {
  int st = 0;
  if (char* d = abi::__cxa_demangle(mangled.c_str(), nullptr, nullptr, &st)) {
    std::string r(d);
    free(d);
    return r;
  }
  if (mangled.find("Unv") == std::string::npos) return mangled;
  std::string standard = Reader::standard_closures(mangled);
  if (!standard.empty()) {
    if (char* d = abi::__cxa_demangle(standard.c_str(), nullptr, nullptr, &st)) {
      std::string r(d);
      free(d);
      return r;
    }
  }
  Reader r(mangled);
  std::string q;
  if (!r.qualified_name(q) || q.empty()) return mangled;  // "_Z0Unv": an empty name
  return q + r.template_args();
}

}  // namespace gpuscope
