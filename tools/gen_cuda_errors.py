#!/usr/bin/env python3
"""Generate cudaError_t / CUresult name tables from the installed CUDA headers.

usage: gen_cuda_errors.py INCLUDE_DIR OUT_CPP OUT_CHECK_CPP
"""
import ast
import operator
import os
import re
import sys

MIN_ENTRIES = 50


def die(msg):
    sys.exit(f"gen_cuda_errors.py: error: {msg}")


def strip_comments(text):
    # Token-wise so that "//" or "/*" inside string/char literals is not treated as a comment.
    pat = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)
    def repl(m):
        s = m.group(0)
        if s.startswith('/*'):
            return ' ' + '\n' * s.count('\n')  # keep line structure for '#' detection
        return ' ' if s.startswith('//') else s
    return pat.sub(repl, text)


def brace_body(text, open_idx):
    depth = 0
    for i in range(open_idx, len(text)):
        if text[i] == '{':
            depth += 1
        elif text[i] == '}':
            depth -= 1
            if depth == 0:
                return text[open_idx + 1:i], i
    die("unbalanced braces")


_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
        ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.LShift: operator.lshift,
        ast.RShift: operator.rshift, ast.BitOr: operator.or_, ast.BitAnd: operator.and_,
        ast.BitXor: operator.xor}
_UOPS = {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Invert: operator.invert}


def eval_expr(expr, known, where):
    def lit(m):
        s = m.group(1).lower()
        if s.startswith('0x'):
            return str(int(s, 16))
        if s.startswith('0b'):
            return str(int(s, 2))
        if len(s) > 1 and s.startswith('0'):
            return str(int(s, 8))
        return s
    py = re.sub(r"\b(0[xX][0-9a-fA-F]+|0[bB][01]+|\d+)[uUlL]*\b", lit, expr).replace('/', '//')
    try:
        tree = ast.parse(py, mode='eval')
    except SyntaxError:
        die(f"{where}: cannot parse value expression {expr!r}")

    def ev(n):
        if isinstance(n, ast.Expression):
            return ev(n.body)
        if isinstance(n, ast.Constant) and isinstance(n.value, int):
            return n.value
        if isinstance(n, ast.Name) and n.id in known:
            return known[n.id]
        if isinstance(n, ast.BinOp) and type(n.op) in _OPS:
            return _OPS[type(n.op)](ev(n.left), ev(n.right))
        if isinstance(n, ast.UnaryOp) and type(n.op) in _UOPS:
            return _UOPS[type(n.op)](ev(n.operand))
        die(f"{where}: unsupported value expression {expr!r}")
    return ev(tree)


def parse_enum(path, head_re, tail_re, label):
    try:
        with open(path, encoding='utf-8', errors='replace') as f:
            text = strip_comments(f.read())
    except OSError as e:
        die(f"cannot read {path}: {e}")
    for m in re.finditer(head_re, text):
        body, close = brace_body(text, m.end() - 1)
        if tail_re and not re.match(tail_re, text[close + 1:]):
            continue
        break
    else:
        die(f"{label} not found in {path}")
    if re.search(r'^\s*#', body, re.M):
        # Conditional enumerators can't be resolved without a preprocessor; refuse rather than guess.
        die(f"{label} in {path} contains preprocessor directives; parser does not support them")
    body = re.sub(r'__attribute__\s*\(\(.*?\)\)|\[\[.*?\]\]', ' ', body, flags=re.S)
    entries, known, nxt = [], {}, 0
    depth, cur, parts = 0, '', []
    for ch in body:  # split on top-level commas only (values may contain parenthesised commas)
        depth += ch == '('
        depth -= ch == ')'
        if ch == ',' and depth == 0:
            parts.append(cur)
            cur = ''
        else:
            cur += ch
    parts.append(cur)
    for part in parts:
        part = part.strip()
        if not part:
            continue  # e.g. "    , cudaErrorApiFailureBase = 10000" leaves an empty item, and trailing commas
        m = re.fullmatch(r'([A-Za-z_]\w*)\s*(?:=\s*(.+))?', part, re.S)
        if not m:
            die(f"{label}: cannot parse enumerator {part!r}")
        name, expr = m.group(1), m.group(2)
        value = eval_expr(expr.strip(), known, f"{label}::{name}") if expr else nxt
        if name in known:
            die(f"{label}: duplicate enumerator {name}")
        known[name] = value
        entries.append((name, value))
        nxt = value + 1
    if len(entries) < MIN_ENTRIES:
        die(f"{label} in {path} has only {len(entries)} enumerators (expected >= {MIN_ENTRIES})")
    return entries


def primary_table(entries):
    first = {}
    for name, value in entries:
        first.setdefault(value, name)  # first spelling wins for aliases
    return sorted(first.items())


def write_file(path, content):
    # Always rewrite (no compare-and-skip): an untouched output older than its inputs would make the build rerun the rule forever.
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + '.tmp'
    with open(tmp, 'w', encoding='utf-8') as f:
        f.write(content)
    os.replace(tmp, path)


def c_ll(v):
    # -9223372036854775808 is not a valid literal; spell INT64_MIN-style values as an expression.
    return f"({v + 1}LL - 1)" if v < 0 else f"{v}LL"


def main(argv):
    if len(argv) != 4:
        die("usage: gen_cuda_errors.py INCLUDE_DIR OUT_CPP OUT_CHECK_CPP")
    inc, out_cpp, out_check = argv[1:]
    rt = parse_enum(os.path.join(inc, 'driver_types.h'),
                    r'\benum\s+(?:\w+\s+)*?cudaError\s*\{', None, 'enum cudaError')
    drv = parse_enum(os.path.join(inc, 'cuda.h'),
                     r'\btypedef\s+enum\s+(?:\w+\s+)*?cudaError_enum\s*\{', r'\s*CUresult\s*;',
                     'enum cudaError_enum (CUresult)')
    header = f"// Generated by tools/gen_cuda_errors.py from {inc}; do not edit.\n"

    def table(var, entries):
        rows = ''.join(f'    {{{c_ll(v)}, "{n}"}},\n' for v, n in primary_table(entries))
        return f"constexpr Entry {var}[] = {{\n{rows}}};\n"

    cpp = header + (
        '#include "core/cuda_errors.h"\n\n#include <algorithm>\n#include <iterator>\n\n'
        'namespace gpuscope {\nnamespace {\n'
        'struct Entry {\n    long long value;\n    const char* name;\n};\n\n'
        + table('kRuntime', rt) + '\n' + table('kDriver', drv) + '\n'
        'template <size_t N>\n'
        'const char* find(const Entry (&t)[N], int64_t v) {\n'
        '    auto it = std::lower_bound(std::begin(t), std::end(t), v,\n'
        '                               [](const Entry& e, int64_t x) { return e.value < x; });\n'
        '    return it != std::end(t) && it->value == v ? it->name : nullptr;\n'
        '}\n'
        'std::string or_unknown(const char* name, int64_t v, const char* unknown_prefix) {\n'
        '    if (name) return name;\n'
        '    return std::string(unknown_prefix) + "(" + std::to_string(v) + ")";\n'
        '}\n'
        '}  // namespace\n\n'
        'const char* cuda_runtime_error_cstr(int64_t value) { return find(kRuntime, value); }\n'
        'const char* cuda_driver_error_cstr(int64_t value) { return find(kDriver, value); }\n'
        'std::string cuda_runtime_error_name(int64_t value) { return or_unknown(find(kRuntime, value), value, "cudaError"); }\n'
        'std::string cuda_driver_error_name(int64_t value) { return or_unknown(find(kDriver, value), value, "CUresult"); }\n'
        'size_t cuda_runtime_error_count() { return std::size(kRuntime); }\n'
        'size_t cuda_driver_error_count() { return std::size(kDriver); }\n'
        '}  // namespace gpuscope\n')

    def check_list(var, entries):
        rows = ''.join(f'    {{(long long){n}, "{n}"}},\n' for n, _ in entries)
        return f"extern const std::vector<std::pair<long long, const char*>> {var} = {{\n{rows}}};\n"

    check = header + (
        '// Values come from the compiler, not the parser, so tests can catch parser mistakes.\n'
        '#include <cuda.h>\n#include <driver_types.h>\n\n#include <utility>\n#include <vector>\n\n'
        + check_list('kRuntimeEnumerators', rt) + '\n' + check_list('kDriverEnumerators', drv))
    write_file(out_cpp, cpp)
    write_file(out_check, check)
    print(f"gen_cuda_errors.py: cudaError_t {len(rt)} enumerators / {len(primary_table(rt))} values; "
          f"CUresult {len(drv)} enumerators / {len(primary_table(drv))} values")


if __name__ == '__main__':
    main(sys.argv)
