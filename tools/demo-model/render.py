"""Render samples with chat_template.jinja exactly as transformers' apply_chat_template does
(Jinja2 sandbox, trim_blocks, lstrip_blocks, loopcontrols, tojson = json.dumps)."""
import json
import os

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))
TEMPLATE_PATH = os.path.join(HERE, "chat_template.jinja")


def _tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _raise(message):
    raise jinja2.exceptions.TemplateError(message)


def template_source():
    with open(TEMPLATE_PATH, encoding="utf-8") as f:
        return f.read()


_env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                     extensions=["jinja2.ext.loopcontrols"])
_env.filters["tojson"] = _tojson
_env.globals["raise_exception"] = _raise
_TEMPLATE = _env.from_string(template_source())


def render(messages, tools=None, add_generation_prompt=True, enable_thinking=True):
    return _TEMPLATE.render(messages=messages, tools=tools, add_generation_prompt=add_generation_prompt,
                            enable_thinking=enable_thinking)


def render_sample(s):
    return render(s["messages"], s["tools"], True, s["enable_thinking"])
