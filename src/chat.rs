//! Chat templates: a conversation → the prompt text, as the GGUF's own Jinja2 template says.
//!
//! GGUF files of instruction-tuned models carry HF's `chat_template` as the metadata string
//! `tokenizer.chat_template`. HF renders it in `apply_chat_template` with Python's jinja2
//! (transformers `utils/chat_template_utils.py`, `_cached_compile_jinja_template` and
//! `render_jinja_template`):
//! * an `ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
//!   extensions=[AssistantTracker, loopcontrols])`;
//! * globals `raise_exception(msg)` (fails the render with `msg`), `strftime_now(fmt)`
//!   (`datetime.now().strftime(fmt)`), `dict`, `namespace`;
//! * filter `tojson` = `json.dumps(x, ensure_ascii=False, indent=None, separators=None,
//!   sort_keys=False)` instead of jinja2's HTML-escaping one;
//! * render variables `messages`, `tools=None`, `documents=None`, `add_generation_prompt`, and
//!   the tokenizer's special tokens (`bos_token`, `eos_token`, …).
//!
//! coco renders with minijinja configured the same way, plus the Python behaviour templates rely
//! on (`python`: `True`/`None` printing, Python's whitespace in `strip()`/`trim`, HF's
//! `tojson`, `str`/`dict` methods). `strftime_now` formats a caller-chosen date (`date`).
//! `tests/chat_template.rs` demands byte-identical output with HF on real templates
//! (`tests/goldens/chat_*.json`, from `tools/chat_goldens.py`).
//!
//! Known differences from Python, none seen in real chat templates: tuples print as lists
//! (`[1, 2]`, not `(1, 2)`); `tojson` accepts iterables that Python cannot serialize
//! (generators); `str.title()` misses the Latin digraphs (`ǆ`); Python-only objects (`cycler`,
//! `joiner`, `lipsum`) are absent.

mod date;
mod python;

use minijinja::syntax::SyntaxConfig;
use minijinja::{AutoEscape, Environment, Error, ErrorKind, Value};

use crate::gguf::{Metadata, MetadataError};
use crate::tokenizer::Tokenizer;

use date::Date;

/// The GGUF metadata key holding HF's `chat_template` (llama.cpp's converter writes it there).
pub const KEY_CHAT_TEMPLATE: &str = "tokenizer.chat_template";

/// The template's name inside its minijinja environment (shown in render errors).
const TEMPLATE_NAME: &str = "chat_template";

/// minijinja fuel for one render: about one unit per instruction, plus allocation sizes.
/// Real templates take about 100 per message (4,000 messages through Gemma 3's, the costliest
/// in the goldens, need 200k–500k), so this leaves room for ~40,000 messages, far more than
/// any context coco runs holds, while a hostile template (nested `range` loops, a string
/// doubled in a loop) stops within about a second (measured natively on a loaded machine)
/// instead of hanging the page.
const FUEL: u64 = 5_000_000;

/// One turn of a conversation: `role` is "system", "user", "assistant" (or whatever else the
/// template accepts); `content` is the text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    pub role: String,
    pub content: String,
}

impl Message {
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Message {
        Message {
            role: role.into(),
            content: content.into(),
        }
    }
}

/// Why a chat template could not be compiled or rendered.
#[derive(Debug, thiserror::Error)]
pub enum ChatError {
    #[error("chat template: {0}")]
    Metadata(#[from] MetadataError),
    #[error("chat template syntax error at line {line}: {detail}")]
    Syntax { line: usize, detail: String },
    /// The template called `raise_exception(message)`: it refuses this conversation (e.g.
    /// Gemma's "Conversation roles must alternate user/assistant/user/assistant/...").
    #[error("the chat template rejected the conversation: {0}")]
    Raised(String),
    #[error("chat template failed at line {}: {detail}", line.map_or("?".to_string(), |l| l.to_string()))]
    Render { line: Option<usize>, detail: String },
    /// HF refuses an empty conversation too ("Cannot apply chat template to an empty
    /// conversation").
    #[error("cannot apply a chat template to an empty conversation")]
    EmptyConversation,
    #[error("invalid date {0:?} for strftime_now: expected YYYY-MM-DD")]
    Date(String),
}

/// `raise_exception(message)`'s error, carried as the source of minijinja's error so that
/// [`ChatError::Raised`] can tell it from the engine's own failures.
#[derive(Debug)]
struct RaisedException(String);

impl std::fmt::Display for RaisedException {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for RaisedException {}

/// A compiled chat template and the special-token text it is rendered with.
pub struct ChatTemplate {
    env: Environment<'static>,
    /// `None`: the model has no BOS token, and `bos_token` is undefined in the template, as
    /// with an HF tokenizer whose `bos_token` is None (Qwen).
    bos_token: Option<String>,
    eos_token: Option<String>,
    date: Date,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("bos_token", &self.bos_token)
            .field("eos_token", &self.eos_token)
            .field("date", &self.date)
            .finish_non_exhaustive()
    }
}

impl ChatTemplate {
    /// The GGUF's chat template, with BOS/EOS text from its vocabulary. None when the GGUF has
    /// no `tokenizer.chat_template` (base models, e.g. the default Gemma 3 270M).
    ///
    /// BOS is `tokenizer.ggml.bos_token_id`'s text and EOS is `tokenizer.ggml.eos_token_id`'s,
    /// as HF's GGUF loader sets `bos_token`/`eos_token`; a missing id leaves the variable
    /// undefined in the template.
    pub fn from_gguf(
        metadata: &Metadata,
        tokenizer: &Tokenizer,
    ) -> Result<Option<ChatTemplate>, ChatError> {
        let Some(source) = metadata.opt_str(KEY_CHAT_TEMPLATE)? else {
            return Ok(None);
        };
        // Special tokens are stored as their literal text in both vocabulary kinds (no `▁` or
        // byte-level spelling), which is what HF's tokenizer gives as `bos_token`.
        let text = |id: Option<u32>| id.and_then(|id| tokenizer.token_text(id).map(String::from));
        let bos = text(tokenizer.bos_id());
        let eos = text(metadata.opt_u32("tokenizer.ggml.eos_token_id")?);
        ChatTemplate::build(source, bos, eos).map(Some)
    }

    /// Compiles `source` (a Jinja2 chat template) to be rendered with these special tokens.
    pub fn new(source: &str, bos_token: &str, eos_token: &str) -> Result<ChatTemplate, ChatError> {
        ChatTemplate::build(
            source,
            Some(bos_token.to_string()),
            Some(eos_token.to_string()),
        )
    }

    /// The date `strftime_now` formats, as `YYYY-MM-DD` (the visitor's local date, from the
    /// page). Without this it is 2024-07-26, the date Llama 3.1/3.2 templates fall back to, so
    /// a prompt does not change from day to day unless the caller asks for today.
    pub fn with_date(mut self, date: impl AsRef<str>) -> Result<ChatTemplate, ChatError> {
        let date = date.as_ref();
        self.date = Date::parse_iso(date).ok_or_else(|| ChatError::Date(date.to_string()))?;
        self.install_strftime();
        Ok(self)
    }

    /// The prompt text for `messages`, ending with the assistant header when
    /// `add_generation_prompt`. Tokenize it with special tokens parsed and no BOS added (the
    /// template writes BOS itself where the model wants it), as HF's `apply_chat_template` does.
    pub fn render(
        &self,
        messages: &[Message],
        add_generation_prompt: bool,
    ) -> Result<String, ChatError> {
        if messages.is_empty() {
            return Err(ChatError::EmptyConversation);
        }
        let messages: Vec<Value> = messages
            .iter()
            .map(|m| {
                // HF passes each message as the caller's dict: role, then content.
                Value::from_pairs([
                    ("role", Value::from(m.role.as_str())),
                    ("content", Value::from(m.content.as_str())),
                ])
            })
            .collect();
        let mut ctx: Vec<(&str, Value)> = vec![
            ("messages", Value::from(messages)),
            ("tools", Value::from(())),
            ("documents", Value::from(())),
            ("add_generation_prompt", Value::from(add_generation_prompt)),
        ];
        if let Some(bos) = &self.bos_token {
            ctx.push(("bos_token", Value::from(bos.as_str())));
        }
        if let Some(eos) = &self.eos_token {
            ctx.push(("eos_token", Value::from(eos.as_str())));
        }
        let template = self.env.get_template(TEMPLATE_NAME).map_err(render_error)?;
        template
            .render(Value::from_pairs(ctx))
            .map_err(render_error)
    }

    fn build(
        source: &str,
        bos_token: Option<String>,
        eos_token: Option<String>,
    ) -> Result<ChatTemplate, ChatError> {
        let mut env = Environment::new();
        let syntax = SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .build()
            .map_err(render_error)?;
        env.set_syntax(syntax);
        // A prompt is plain text: no HTML escaping whatever the template's name.
        env.set_auto_escape_callback(|_| AutoEscape::None);
        env.set_fuel(Some(FUEL));
        env.set_formatter(python::format_output);
        env.set_unknown_method_callback(python::unknown_method);
        env.add_filter("tojson", python::tojson);
        env.add_filter("trim", python::trim_filter);
        env.add_filter("string", python::string_filter);
        env.add_function(
            "raise_exception",
            |message: Value| -> Result<Value, Error> {
                let message = python::py_str(&message)?;
                Err(
                    Error::new(ErrorKind::InvalidOperation, "raise_exception called")
                        .with_source(RaisedException(message)),
                )
            },
        );
        env.add_template_owned(TEMPLATE_NAME, without_generation_tags(source))
            .map_err(|e| match (e.kind(), e.line()) {
                (ErrorKind::SyntaxError, Some(line)) => ChatError::Syntax {
                    line,
                    detail: e.detail().unwrap_or("invalid syntax").to_string(),
                },
                _ => render_error(e),
            })?;
        let mut template = ChatTemplate {
            env,
            bos_token,
            eos_token,
            date: Date::DEFAULT,
        };
        template.install_strftime();
        Ok(template)
    }

    /// (Re)binds `strftime_now` to the current date; globals are looked up at render time.
    fn install_strftime(&mut self) {
        let date = self.date;
        self.env
            .add_function("strftime_now", move |format: String| date.strftime(&format));
    }
}

/// HF's `{% generation %}…{% endgeneration %}` tag (its `AssistantTracker` extension) only
/// marks assistant spans for training masks and renders its body unchanged. minijinja has no
/// such tag, so it becomes `{% if true %}…{% endif %}`, which keeps the tag's whitespace
/// control (`{%-`, `-%}`) and the block trimming around it.
fn without_generation_tags(source: &str) -> String {
    if !source.contains("generation") {
        return source.to_string();
    }
    let mut out = String::with_capacity(source.len());
    let mut rest = source;
    while let Some(start) = rest.find("{%") {
        out.push_str(&rest[..start]);
        let tag = &rest[start..];
        let Some(end) = tag.find("%}") else {
            break;
        };
        let inner = &tag[2..end];
        let (open, body) = match inner.strip_prefix(['-', '+']) {
            Some(b) => (&inner[..1], b),
            None => ("", inner),
        };
        let (body, close) = match body.strip_suffix(['-', '+']) {
            Some(b) => (b, &body[body.len() - 1..]),
            None => (body, ""),
        };
        match body.trim() {
            "generation" => out.push_str(&format!("{{%{open} if true {close}%}}")),
            "endgeneration" => out.push_str(&format!("{{%{open} endif {close}%}}")),
            _ => out.push_str(&tag[..end + 2]),
        }
        rest = &tag[end + 2..];
    }
    out.push_str(rest);
    out
}

/// A minijinja error as a [`ChatError`]: `raise_exception`'s message when that is the cause.
fn render_error(e: Error) -> ChatError {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&e);
    while let Some(err) = source {
        if let Some(raised) = err.downcast_ref::<RaisedException>() {
            return ChatError::Raised(raised.0.clone());
        }
        source = err.source();
    }
    let what = match e.kind() {
        ErrorKind::OutOfFuel => "the template ran too long (out of fuel)".to_string(),
        kind => kind.to_string(),
    };
    let detail = match e.detail() {
        Some(d) => format!("{what}: {d}"),
        None => what,
    };
    ChatError::Render {
        line: e.line(),
        detail,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(source: &str, messages: &[Message]) -> Result<String, ChatError> {
        ChatTemplate::new(source, "<s>", "</s>")?.render(messages, true)
    }

    fn user(text: &str) -> Vec<Message> {
        vec![Message::new("user", text)]
    }

    #[test]
    fn raise_exception_is_typed() {
        let err = render(
            "{{ raise_exception('no ' ~ messages[0].role) }}",
            &user("x"),
        );
        match err {
            Err(ChatError::Raised(msg)) => assert_eq!(msg, "no user"),
            other => panic!("expected Raised, got {other:?}"),
        }
    }

    #[test]
    fn syntax_error_names_the_line() {
        match ChatTemplate::new("line one\n{% if %}\n", "", "") {
            Err(ChatError::Syntax { line, .. }) => assert_eq!(line, 2),
            other => panic!("expected Syntax, got {other:?}"),
        }
    }

    #[test]
    fn render_error_names_the_line() {
        match render("ok\n{{ messages[0].content.nope.deeper }}", &user("x")) {
            Err(ChatError::Render { line, .. }) => assert_eq!(line, Some(2)),
            other => panic!("expected Render, got {other:?}"),
        }
    }

    #[test]
    fn hostile_template_runs_out_of_fuel() {
        let spin =
            "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}";
        // Doubling a string 40 times would want a terabyte; fuel also pays for allocations.
        let grow = "{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s | length }}";
        for source in [spin, grow] {
            match render(source, &user("x")) {
                Err(ChatError::Render { detail, .. }) => {
                    assert!(detail.contains("fuel"), "{detail}")
                }
                other => panic!("expected out of fuel, got {other:?}"),
            }
        }
    }

    #[test]
    fn empty_conversation_is_refused() {
        let t = ChatTemplate::new("{{ messages }}", "", "").unwrap();
        assert!(matches!(
            t.render(&[], true),
            Err(ChatError::EmptyConversation)
        ));
    }

    #[test]
    fn date_is_settable_and_checked() {
        let t = ChatTemplate::new("{{ strftime_now('%d %b %Y') }}", "", "").unwrap();
        assert_eq!(t.render(&user("x"), false).unwrap(), "26 Jul 2024");
        let t = t.with_date("2025-03-09").unwrap();
        assert_eq!(t.render(&user("x"), false).unwrap(), "09 Mar 2025");
        assert!(matches!(t.with_date("9 Mar 2025"), Err(ChatError::Date(_))));
    }

    #[test]
    fn generation_tags_render_their_body() {
        let src = "{% for m in messages %}{%- generation -%}\n[{{ m.content }}]\n{%- endgeneration %}{% endfor %}";
        assert_eq!(without_generation_tags("{%generation%}"), "{% if true %}");
        assert_eq!(render(src, &user("a")).unwrap(), "[a]");
    }

    #[test]
    fn python_printing() {
        let src = "{{ true }} {{ none }} {{ [1, 'a', 2.5] }} {{ {'k': false} }} {{ 1e16 }}|{{ undefined_name }}|{{ '  x ' | trim }}";
        assert_eq!(
            render(src, &user("x")).unwrap(),
            "True None [1, 'a', 2.5] {'k': False} 1e+16||x"
        );
    }
}
