// Interpreter features, each rendered by both this interpreter and Python Jinja2.
#include <gtest/gtest.h>

#include "chat/jinja_template.h"
#include "chat/python_reference.h"
#include "chat/template_error.h"

namespace mls::chat::jinja {
namespace {

std::string render(const std::string& src,
                   const nlohmann::ordered_json& vars = nlohmann::ordered_json::object()) {
  std::vector<std::pair<std::string, Value>> v;
  for (const auto& [k, x] : vars.items()) v.emplace_back(k, Value::from_json(x));
  return Template(src).render(v);
}

const nlohmann::ordered_json kVars = nlohmann::ordered_json::parse(R"({
  "s": "Hello, World", "n": 7, "f": 2.5, "neg": -7, "t": true, "z": null, "e": "",
  "l": [3, 1, "x", 2.0, null, true], "nums": [4, 2, 9, 2],
  "d": {"b": 1, "a": [1, {"k": "v"}], "items": "shadowed"},
  "msgs": [{"role": "system", "content": "sys"}, {"role": "user", "content": "u1"},
           {"role": "assistant", "content": "a1", "x": 1}, {"role": "user", "content": "u2"}],
  "uni": "héllo wörld ✓ 🚀 'q' \"dq\"", "big": 12345678901234, "tiny": 0.0001, "huge": 1e16
})");

const std::vector<std::string> kSnippets = {
    // output of values as Python prints them
    "{{ s }}|{{ n }}|{{ f }}|{{ t }}|{{ z }}|{{ undefined_thing }}|{{ l }}|{{ d }}",
    "{{ 1.0 }} {{ 0.1 + 0.2 }} {{ 1e100 }} {{ tiny }} {{ huge }} {{ 1/3 }} {{ -0.0 }} {{ 3.0e-5 }}",
    "{{ big }} {{ n / 2 }} {{ n // 2 }} {{ neg // 2 }} {{ neg % 3 }} {{ n % -3 }} {{ f // 1 }} {{ "
    "2 ** 10 }} {{ 2 ** -1 }}",
    "{{ [uni] }} {{ ['it\\'s'] }} {{ ('a', 1) }} {{ (1,) }} {{ {'k': [none, false]} }}",
    "{{ 'a' ~ n ~ z ~ t }} {{ 'ab' * 3 }} {{ [1] + [2] }} {{ s + '!' }} {{ -n }} {{ not e }}",
    // whitespace control, trim_blocks, lstrip_blocks
    "a\n  {% if t %}\n    x\n  {% endif %}\nb",
    "a  {%- if t -%}  x  {%- endif -%}  b\n{{- ' c ' -}}\n d",
    "line\n    {# comment #}\nnext {# inline #} end\n  {%+ if t %}kept{% endif %}",
    "{% for i in nums %}\n  {{ i }}\n{% endfor %}\n",
    "{% raw %}{{ not rendered }}{% endraw %}",
    "{{ '{' }}{{ {'a': {'b': 1}} }}",
    // loops
    "{% for m in msgs %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.length }}/{{ loop.first }}/{{ "
    "loop.last }}/{{ loop.revindex }} {% endfor %}",
    "{% for m in msgs if m.role == 'user' %}{{ m.content }}{{ ',' if not loop.last }}{% endfor %}",
    "{% for x in [] %}never{% else %}empty{% endfor %}",
    "{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i > 4 %}{% break %}{% "
    "endif %}{{ i }}{% endfor %}",
    "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for k in d %}{{ k }}{% endfor %}",
    "{% for a, b in [[1, 2], [3, 4]] %}{{ a + b }}{% endfor %}{% for c in 'héllo' %}[{{ c }}]{% "
    "endfor %}",
    "{% for m in msgs %}{{ loop.previtem.role if loop.previtem is defined else '-' }}>{{ "
    "loop.nextitem.role if loop.nextitem is defined else '-' }} {% endfor %}",
    // scoping and namespace
    "{% set x = 1 %}{% for i in [1, 2] %}{% set x = x + i %}{{ x }}{% endfor %}{{ x }}",
    "{% set ns = namespace(total=0, seen=[]) %}{% for i in nums %}{% set ns.total = ns.total + i "
    "%}{% endfor %}{{ ns.total }} {{ ns.seen }}",
    "{% if t %}{% set y = 'set in if' %}{% endif %}{{ y }}",
    "{% set a, b = [1, 2] %}{{ b }}{{ a }}{% set blk %}inner {{ n }}{% endset %}[{{ blk }}]",
    // macros
    "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('Ann') }} {{ "
    "greet('Bob', '?') }} {{ greet(punct='.', name='Cy') }}",
    "{% macro show(v) %}{% if v is string %}s:{{ v }}{% elif v is mapping %}m:{{ v | length }}{% "
    "else %}o:{{ v }}{% endif %}{% endmacro %}{{ show('a') }} {{ show(d) }} {{ show(l) }}",
    // attribute and subscript access
    "{{ d.b }} {{ d['a'][1].k }} {{ d.missing is defined }} {{ d['items'] }} {{ l[-1] }} {{ l[10] "
    "is defined }} {{ d.a.0 }}",
    "{{ l[1:3] }} {{ l[::-1] }} {{ l[-2:] }} {{ s[:5] }} {{ s[::2] }} {{ uni[1:4] }} {{ "
    "nums[1:-1:2] }}",
    "{{ z.anything is defined }} {{ msgs[0].get('role') }} {{ msgs[0].get('nope', 'dflt') }} {{ "
    "d.keys() | list }} {{ d.values() | list | length }}",
    // comparisons and logic
    "{{ 1 < 2 < 3 }} {{ 1 == 1.0 }} {{ 'a' in s }} {{ 'H' in s }} {{ 3 in nums }} {{ 'b' in d }} "
    "{{ 5 not in nums }} {{ t == 1 }}",
    "{{ e or 'fallback' }} {{ s and n }} {{ z or z }} {{ 'x' if z else 'y' }} {{ 'x' if t }} {{ "
    "[1, 2] < [1, 3] }} {{ 'b' > 'a' }}",
    // tests
    "{{ n is number }} {{ t is number }} {{ t is boolean }} {{ n is integer }} {{ f is float }} {{ "
    "z is none }} {{ s is string }} {{ d is mapping }} {{ l is iterable }} {{ s is sequence }} {{ "
    "t is true }} {{ z is false }}",
    "{{ n is odd }} {{ n is even }} {{ 9 is divisibleby 3 }} {{ n is eq 7 }} {{ n is not eq 7 }} "
    "{{ 'AB' is upper }} {{ x is undefined }} {{ range is callable }}",
    // filters
    "{{ d | tojson }} {{ l | tojson }} {{ uni | tojson }} {{ uni | tojson(ensure_ascii=True) }} {{ "
    "d | tojson(indent=2) }}",
    "{{ d | tojson(separators=(',', ':'), sort_keys=true) }} {{ {'f': 1.5, 'e': [], 'o': {}} | "
    "tojson(indent=1) }} {{ 'tab\\tnl\\n\\u0001' | tojson }}",
    "{{ d | items | list }} {{ s | length }} {{ uni | length }} {{ nums | count }} {{ nums | "
    "join('-') }} {{ msgs | join(', ', attribute='role') }}",
    "[{{ '  pad  ' | trim }}] [{{ 'xxhixx' | trim('x') }}] {{ s | upper }} {{ s | lower }} {{ "
    "'hello world-foo(bar' | title }} {{ 'hELLO' | capitalize }}",
    "{{ undefined_thing | default('dv') }} {{ e | default('dv') }} {{ e | default('dv', true) }} "
    "{{ z | d('dz', boolean=true) }}",
    "{{ nums | first }} {{ nums | last }} {{ s | first }} {{ [] | first is defined }} {{ n | "
    "string }} {{ '42' | int + 1 }} {{ '4.7' | int }} {{ 'x' | int(5) }} {{ '2.5' | float }} {{ 3 "
    "| float }}",
    "{{ s | list }} {{ d | list }} {{ s | replace('o', '0') }} {{ s | replace('l', 'L', 2) }} {{ "
    "'<b>' | safe }} {{ neg | abs }} {{ nums | reverse | list }}",
    "{{ msgs | map(attribute='role') | list }} {{ nums | map('string') | join }} {{ msgs | "
    "map(attribute='x', default=0) | list }}",
    "{{ msgs | selectattr('role', 'equalto', 'user') | map(attribute='content') | list }} {{ msgs "
    "| rejectattr('x') | list | length }} {{ msgs | selectattr('x') | list | length }}",
    "{{ nums | select('odd') | list }} {{ nums | reject('even') | list }} {{ nums | select('gt', "
    "2) | list }} {{ l | select | list }}",
    "{{ ['a', 'A', 'b', 'a'] | unique | list }} {{ nums | unique | list }}",
    "{{ 'a\\nb\\n\\nc' | indent }}|{{ 'a\\nb' | indent(2, true) }}|{{ 'a\\n\\nb' | indent(width='> "
    "', blank=true) }}",
    // string methods
    "{{ ' a b  c '.split() }} {{ 'a,b,,c'.split(',') }} {{ 'a,b,c'.split(',', 1) }} {{ '  x  "
    "'.strip() }}|{{ 'xxaxx'.lstrip('x') }}|{{ 'xxaxx'.rstrip('x') }}",
    "{{ s.startswith('Hell') }} {{ s.endswith(('x', 'ld')) }} {{ s.replace('l', '_') }} {{ "
    "s.upper() }} {{ s.lower() }} {{ 'hi there'.title() }} {{ s.find('World') }} {{ uni.find('w') "
    "}} {{ s.find('zz') }}",
    "{{ '<think>a</think>b'.split('</think>')[0].split('<think>')[-1] }} {{ '-'.join(['a', 'b']) "
    "}} {{ 'aaa'.count('a') }}",
    // globals
    "{{ range(3) | list }} {{ range(1, 10, 3) | list }} {{ range(5, 0, -2) | list }} {{ dict(a=1, "
    "b='x') }} {{ namespace(a=1) }}",
    "{% set x = {'k': 1} %}{{ x.k }}{% set ls = [1, 2] + [3] %}{{ ls | length }}{{ (1, 2)[1] }}",
};

TEST(Jinja, MatchesPythonOnFeatureSnippets) {
  if (!testing::python_jinja_available())
    GTEST_SKIP() << "/usr/bin/python3 cannot import jinja2 (apt install python3-jinja2); "
                    "the reference rendering is unavailable";
  std::vector<testing::ReferenceCase> cases;
  for (const auto& src : kSnippets) cases.push_back({src, kVars});
  const auto ref = testing::render_with_python(cases);
  ASSERT_EQ(ref.size(), kSnippets.size());
  for (size_t i = 0; i < kSnippets.size(); ++i) {
    SCOPED_TRACE(kSnippets[i]);
    ASSERT_TRUE(ref[i].ok) << ref[i].error;
    EXPECT_EQ(render(kSnippets[i], kVars), ref[i].output);
  }
}

TEST(Jinja, BasicsWithoutPython) {
  EXPECT_EQ(render("{{ 1 + 2 }}{{ [1.0, None, 'a'] }}"), "3[1.0, None, 'a']");
  EXPECT_EQ(render("x\n{% if true %}\ny\n{% endif %}\nz\n"), "x\ny\nz");
  EXPECT_EQ(render("{{ {'b': 1, 'a': 2} | tojson }}"), R"({"b": 1, "a": 2})");
  // String repetition (built by doubling): every count, both operand orders.
  EXPECT_EQ(render("{{ 'ab' * 3 }}|{{ 5 * 'xyz' }}|{{ 'q' * 0 }}|{{ 'q' * -2 }}|{{ '' * 7 }}|"
                   "{{ ('abc' * 1000) | length }}|{{ ('abc' * 1000)[2997:] }}"),
            "ababab|xyzxyzxyzxyzxyz||||3000|abc");
}

TEST(Jinja, SyntaxErrorsCarryLineAndColumn) {
  try {
    Template("line one\n{% if x %}\n  {{ 1 + }}\n{% endif %}");
    FAIL() << "expected a syntax error";
  } catch (const TemplateSyntaxError& e) {
    EXPECT_NE(std::string(e.what()).find("line 3, column 10"), std::string::npos) << e.what();
  }
  EXPECT_THROW(Template("{% for x in y %}no end"), TemplateSyntaxError);
  EXPECT_THROW(Template("{% include 'x' %}"), TemplateSyntaxError);
  EXPECT_THROW(Template("{{ 'unterminated }}"), TemplateSyntaxError);
  EXPECT_THROW(Template("{% break %}"), TemplateSyntaxError);
  EXPECT_THROW(Template("{# open comment"), TemplateSyntaxError);
}

// Found by fuzz_jinja: a \x/\u/\U escape without hex digits ended the process (std::stoul
// threw std::invalid_argument past every handler).
TEST(Jinja, BadStringEscapesAreSyntaxErrors) {
  EXPECT_EQ(render("{{ '\\x41\\u00e9\\U0001F600' }}"), "A\u00e9\U0001F600");
  for (const char* bad : {"{{ '\\xzz' }}", "{{ '\\u+123' }}", "{{ '\\u 123' }}", "{{ '\\x4g' }}",
                          "{{ '\\ud800' }}", "{{ '\\U00110000' }}", "{{ '\\u12' }}"})
    EXPECT_THROW(Template{bad}, TemplateSyntaxError) << bad;
}

TEST(Jinja, RuntimeErrorsCarryLineAndColumn) {
  try {
    render("ok\n  {{ raise_exception('Conversation roles must alternate') }}");
    FAIL() << "expected a runtime error";
  } catch (const TemplateRuntimeError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("line 2, column 6"), std::string::npos) << what;
    EXPECT_NE(what.find("Conversation roles must alternate"), std::string::npos) << what;
  }
  EXPECT_THROW(render("{{ 'a' + 1 }}"), TemplateRuntimeError);
  EXPECT_THROW(render("{{ nope.attr }}"), TemplateRuntimeError);
  EXPECT_THROW(render("{{ 1 // 0 }}"), TemplateRuntimeError);
  EXPECT_THROW(render("{% for x in none %}{% endfor %}"), TemplateRuntimeError);
  EXPECT_THROW(render("{{ x | nosuchfilter }}"), TemplateRuntimeError);
  // Found by fuzz_jinja: an attribute name of another type ended the process
  // (std::bad_variant_access).
  EXPECT_THROW(render("{{ [{'a': 1}] | selectattr(1.5) | list }}"), TemplateRuntimeError);
  EXPECT_THROW(render("{{ [{'a': 1}] | map(attribute=none) | list }}"), TemplateRuntimeError);
}

TEST(Jinja, StrftimeNowFormatsTheCurrentDate) {
  const std::string year = render("{{ strftime_now('%Y') }}");
  ASSERT_EQ(year.size(), 4u);
  EXPECT_GE(std::stoi(year), 2024);
}

}  // namespace
}  // namespace mls::chat::jinja
