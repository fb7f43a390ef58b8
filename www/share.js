// Share links: the page's state as URL parameters, and back.
//
// The parameter names are the contract in www/API.md. Everything read from the URL is
// untrusted: values are restored as text (input.value / textContent), the model URL must
// be http(s) or relative, and the conversation is checked field by field.

/** Parameter name ↔ input element id, for the plain text/number fields. */
export const FIELD_PARAMS = [
  ["temp", "temperature"],
  ["top_k", "top-k"],
  ["top_p", "top-p"],
  ["min_p", "min-p"],
  ["rep", "repeat-penalty"],
  ["seed", "seed"],
  ["max", "max-tokens"],
  ["ctx", "context"],
];

/** The in-page benchmark's sizes (read with `bench=1`; not written into share links). */
export const BENCH_PARAMS = [
  ["bench_pp", "bench-pp"],
  ["bench_tg", "bench-tg"],
  ["bench_reps", "bench-reps"],
];

const CHAT_ROLES = new Set(["system", "user", "assistant"]);
// Bounds on what a link may carry, so a hostile link can't make the page do silly work.
const MAX_CHAT_MESSAGES = 200;
const MAX_TEXT_CHARS = 100_000;

/**
 * Checks a model URL from a link or the URL box.
 * Returns {ok: true, url (absolute), sameOrigin} or {ok: false, reason}.
 */
export function checkModelUrl(raw, base = location.href) {
  const text = String(raw ?? "").trim();
  if (!text) return { ok: false, reason: "no model URL given" };
  let parsed;
  try {
    parsed = new URL(text, base);
  } catch {
    return { ok: false, reason: `not a valid URL: ${text.slice(0, 200)}` };
  }
  // Relative URLs resolve to the page's own scheme; anything with another scheme
  // (javascript:, data:, blob:, file:, …) is refused outright.
  if (parsed.protocol !== "http:" && parsed.protocol !== "https:") {
    return { ok: false, reason: `refused: model URLs must be http(s) or relative, not "${parsed.protocol}"` };
  }
  if (parsed.username || parsed.password) {
    return { ok: false, reason: "refused: model URLs may not carry a user name or password" };
  }
  const page = new URL(base);
  return { ok: true, url: parsed.href, sameOrigin: parsed.origin === page.origin, host: parsed.host };
}

/** Checks a conversation from a link: an array of {role, content} with known roles. */
export function checkMessages(value) {
  if (!Array.isArray(value)) return { ok: false, reason: "the chat parameter is not a list of messages" };
  if (value.length > MAX_CHAT_MESSAGES) return { ok: false, reason: `the chat parameter has more than ${MAX_CHAT_MESSAGES} messages` };
  const messages = [];
  for (const m of value) {
    if (!m || typeof m !== "object" || !CHAT_ROLES.has(m.role) || typeof m.content !== "string") {
      return { ok: false, reason: "the chat parameter holds a message that is not {role: system|user|assistant, content: text}" };
    }
    messages.push({ role: m.role, content: m.content.slice(0, MAX_TEXT_CHARS) });
  }
  return { ok: true, messages };
}

/**
 * Reads the share parameters from a query string. Returns plain strings (and the parsed
 * conversation); the caller puts them into the form. Problems are collected, not thrown,
 * so one bad field doesn't lose the rest of the link.
 */
export function readShareParams(search = location.search) {
  const params = new URLSearchParams(search);
  const out = { fields: {}, benchFields: {}, problems: [] };
  if (params.has("model")) {
    const check = checkModelUrl(params.get("model"));
    if (check.ok) out.model = params.get("model").trim();
    else out.problems.push(check.reason);
  }
  const mode = params.get("mode");
  if (mode === "complete" || mode === "chat") out.mode = mode;
  else if (mode !== null) out.problems.push(`unknown mode "${mode.slice(0, 40)}"`);
  if (params.has("prompt")) out.prompt = params.get("prompt").slice(0, MAX_TEXT_CHARS);
  if (params.has("chat")) {
    let parsed;
    try {
      parsed = JSON.parse(params.get("chat"));
    } catch {
      parsed = undefined;
      out.problems.push("the chat parameter is not valid JSON");
    }
    if (parsed !== undefined) {
      const check = checkMessages(parsed);
      if (check.ok) out.chat = check.messages;
      else out.problems.push(check.reason);
    }
  }
  for (const [names, target] of [[FIELD_PARAMS, out.fields], [BENCH_PARAMS, out.benchFields]]) {
    for (const [name, id] of names) {
      if (!params.has(name)) continue;
      const value = params.get(name).trim();
      // Only plain decimal numbers: the inputs are type=number, and anything else would be
      // silently dropped by the browser; saying so is better.
      if (/^-?\d+(\.\d+)?([eE]-?\d+)?$/.test(value)) target[id] = value;
      else out.problems.push(`ignored ${name}="${value.slice(0, 40)}" (not a number)`);
    }
  }
  if (params.has("mk")) out.megakernel = params.get("mk") === "1";
  // The A/B switch: sample on the CPU, reading every token's logits back (same tokens).
  if (params.has("cpu_sampling")) out.cpuSampling = params.get("cpu_sampling") === "1";
  // The other A/B switch: subgroups off (0) or on wherever granted (1).
  if (params.has("subgroups")) out.subgroups = params.get("subgroups") === "1";
  // And who merges flash-decoding's key ranges: "separate" (a second dispatch, the A/B
  // baseline) or the split kernel's last workgroup (anything else, the default).
  if (params.has("attn_merge")) out.attnMerge = params.get("attn_merge") === "separate" ? "separate" : "in_split";
  // Decode batches kept in flight, 1–3 (A/B runs; absent: the engine's 2).
  if (params.has("in_flight")) {
    const n = Number(params.get("in_flight"));
    if ([1, 2, 3].includes(n)) out.inFlight = n;
    else out.problems.push(`ignored in_flight="${params.get("in_flight").slice(0, 40)}" (not 1, 2 or 3)`);
  }
  // The prefill GEMM by name (A/B runs, and the tile kernels through the browser's compiler).
  if (params.has("gemm")) {
    const gemm = params.get("gemm");
    if (["auto", "tiled", "matrix", "dot4", "4x8", "8x4", "4x4", "4x8h", "8x4h", "4x4h"].includes(gemm)) out.gemm = gemm;
    else out.problems.push(`ignored gemm="${gemm.slice(0, 40)}" (not auto, tiled, matrix, dot4, 4x8, 8x4, 4x4, 4x8h, 8x4h or 4x4h)`);
  }
  // The single-pass attention's 2 × 2 score blocks and larger tiles (A/B runs; 1: on).
  if (params.has("attn_blocked")) out.attnBlocked = params.get("attn_blocked") === "1";
  out.bench = params.get("bench") === "1";
  out.any = [...params.keys()].length > 0;
  return out;
}

/**
 * Builds the share link for the current state.
 * state: {model, mode, prompt, chat (messages), fields: {id: value}, megakernel, cpuSampling, subgroups, attnMerge, inFlight, gemm, attnBlocked}
 */
export function buildShareUrl(state, base = location.href) {
  const url = new URL(base);
  url.search = "";
  url.hash = "";
  const params = new URLSearchParams();
  params.set("model", state.model);
  params.set("mode", state.mode);
  // Always present, even empty: otherwise the page's default prompt would stand in for it.
  params.set("prompt", state.prompt || "");
  if (state.mode === "chat" && state.chat && state.chat.length) params.set("chat", JSON.stringify(state.chat));
  for (const [name, id] of FIELD_PARAMS) {
    const value = state.fields[id];
    if (value !== undefined && value !== "") params.set(name, value);
  }
  params.set("mk", state.megakernel ? "1" : "0");
  if (state.cpuSampling) params.set("cpu_sampling", "1");
  if (state.subgroups !== undefined) params.set("subgroups", state.subgroups ? "1" : "0");
  if (state.attnMerge === "separate") params.set("attn_merge", "separate");
  if (state.inFlight !== undefined) params.set("in_flight", String(state.inFlight));
  if (state.gemm && state.gemm !== "auto") params.set("gemm", state.gemm);
  if (state.attnBlocked) params.set("attn_blocked", "1");
  url.search = params.toString();
  return url.href;
}
