"""Reference renderer for chat templates: Python Jinja2 configured exactly as transformers'
apply_chat_template configures it (REFERENCE.md, "Chat templates as Hugging Face renders them").

    /usr/bin/python3 render_reference.py CASES.json OUT.json

CASES.json is a list of {"template": source, "variables": {...}}; OUT.json receives, for each
case, {"output": text} or {"error": message}.
"""
import json
import sys
from datetime import datetime

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def strftime_now(fmt):
    return datetime.now().strftime(fmt)


def main():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    with open(sys.argv[1], encoding="utf-8") as f:
        cases = json.load(f)
    results = []
    for case in cases:
        try:
            results.append({"output": env.from_string(case["template"]).render(**case["variables"])})
        except Exception as e:  # the C++ side only checks that both fail
            results.append({"error": f"{type(e).__name__}: {e}"})
    with open(sys.argv[2], "w", encoding="utf-8") as f:
        json.dump(results, f, ensure_ascii=False)


main()
