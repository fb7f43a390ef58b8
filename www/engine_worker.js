// The engine's own thread: a module Web Worker that loads coco's wasm (src/web/) and owns
// the one `Coco`. Downloading the model (www/model_load.js), tokenizing, parsing the streamed
// file, JSON, CPU sampling and recording GPU work all run here, so the page's main thread
// stays free for the visitor (long tasks of 264-621 ms were measured there when the engine
// ran on it, and 49-266 ms while it still fetched the model's bytes).
//
// The page talks to this file only through www/engine.js. Messages:
//   page → worker  {type: "call", id, method, args}   one engine call; `open` comes first
//                  {type: "stop", id?}                 stop generation or load `id` (every
//                                                      generation when absent)
//   worker → page  {type: "token", id, piece, token}   one generated piece of call `id`
//                  {type: "event", id, event}          a load_url event (www/model_load.js)
//                  {type: "result", id, ok, value | error}
// Calls run as they arrive, like calls on the page's thread did: an async call (a
// generation, a load) lets memory(), lost(), destroy_device() and stop messages in between
// its tokens or chunks, and the engine answers "busy" to anything that needs its state
// meanwhile.

import { loadUrl } from "./model_load.js";

// The wasm-bindgen module (the glue JS, with its `Coco` class) once `open` has loaded it.
let bindings = null;
let coco = null;
// Generation calls now running, and the ones the page asked to stop. The engine's on_token
// callback below checks the second between tokens: a stop takes effect at the next token.
const generating = new Set();
const stopAsked = new Set();
// load_url calls now running: id → the AbortController a stop message fires.
const loading = new Map();
// The most bytes handed to the engine's load_push at once: wasm-bindgen copies each slice
// into the wasm heap, so this bounds that copy whatever the page sends.
const MAX_PUSH_BYTES = 1 << 20;

self.onmessage = (event) => {
  const message = event.data;
  if (message?.type === "stop") {
    for (const id of message.id === undefined ? generating : [message.id]) {
      if (generating.has(id)) stopAsked.add(id);
    }
    if (message.id !== undefined) loading.get(message.id)?.abort();
  } else if (message?.type === "call") {
    answer(message);
  }
};

async function answer({ id, method, args }) {
  try {
    const value = await run(id, method, args ?? []);
    self.postMessage({ type: "result", id, ok: true, value });
  } catch (err) {
    self.postMessage({ type: "result", id, ok: false, error: errorFields(err) });
  }
}

async function run(id, method, args) {
  switch (method) {
    case "open":
      return open(args[0], args[1]);
    case "load_push":
      return loadPush(args[0]);
    case "load_url":
      return loadFromUrl(id, args[0], args[1]);
    case "generate":
    case "chat":
      return generation(id, method, args);
    case "free":
      coco?.free();
      coco = null;
      return undefined;
    default:
      if (!coco) throw pageError("internal", "the engine is not open (open must come first)");
      if (typeof coco[method] !== "function") throw pageError("invalid_request", `the engine has no method ${String(method).slice(0, 40)}`);
      return coco[method](...args);
  }
}

/**
 * Loads the wasm module (`files`: the glue JS and the .wasm, as the page was built) and opens
 * the GPU. Returns the names of the engine's methods, so the page offers exactly those.
 */
async function open(options, files) {
  // Checked before the wasm loads: a browser may give the page WebGPU but not its workers,
  // and the page must say that plainly rather than "no adapter".
  if (!self.navigator?.gpu) {
    throw pageError("not_yet", "no WebGPU in Web Workers: this browser gives navigator.gpu to the page but not to the worker where coco runs its engine", { reason: "no_webgpu_in_worker" });
  }
  if (!bindings) {
    const glue = await import(files.js);
    await glue.default({ module_or_path: files.wasm });
    bindings = glue;
  }
  coco = await bindings.Coco.open(options);
  const proto = bindings.Coco.prototype;
  const methods = Object.getOwnPropertyNames(proto)
    .filter((name) => name !== "constructor" && !name.startsWith("__") && typeof proto[name] === "function");
  return { methods };
}

/** Streams one chunk into the engine, in slices; → the last slice's LoadProgress. */
function loadPush(chunk) {
  if (!coco) throw pageError("internal", "the engine is not open (open must come first)");
  let progress = null;
  for (let at = 0; at < chunk.length; at += MAX_PUSH_BYTES) {
    progress = coco.load_push(chunk.subarray(at, at + MAX_PUSH_BYTES));
  }
  // An empty chunk still asks the engine (for its progress).
  if (progress === null) progress = coco.load_push(chunk);
  return progress;
}

/**
 * load_url(url, {context, expected_sha256?}): the whole load of a model by URL, here in the
 * worker (www/model_load.js); its events go to the page as they happen, and a stop message
 * with this call's id cancels it.
 */
async function loadFromUrl(id, url, options) {
  if (!coco) throw pageError("internal", "the engine is not open (open must come first)");
  const abort = new AbortController();
  loading.set(id, abort);
  const emit = (event) => self.postMessage({ type: "event", id, event });
  try {
    const settings = { context: options?.context, expectedSha256: options?.expected_sha256 ?? null };
    return await loadUrl(coco, loadPush, String(url), settings, abort.signal, emit);
  } finally {
    loading.delete(id);
  }
}

/** generate(prompt, options) or chat(messages, options), streaming tokens to the page. */
async function generation(id, method, args) {
  if (!coco) throw pageError("internal", "the engine is not open (open must come first)");
  generating.add(id);
  const onToken = (piece, token) => {
    self.postMessage({ type: "token", id, piece, token: token ?? null });
    return !stopAsked.has(id);
  };
  try {
    return await coco[method](args[0], args[1], onToken);
  } finally {
    generating.delete(id);
    stopAsked.delete(id);
  }
}

/** An Error with a PageError's fields (www/API.md), as src/web/ throws them. */
function pageError(kind, message, extra = {}) {
  return Object.assign(new Error(message), { name: "PageError", kind, message, ...extra });
}

/**
 * What crosses back for a thrown value: an Error's name, message and stack, plus its own
 * plain fields (a PageError's kind and numbers). Structured cloning of an Error would drop
 * those fields, and the page switches on `kind`.
 */
function errorFields(err) {
  if (err === null || typeof err !== "object") return { name: "Error", message: String(err) };
  const fields = { name: String(err.name ?? "Error"), message: String(err.message ?? err), stack: String(err.stack ?? "") };
  for (const [key, value] of Object.entries(err)) {
    if (["string", "number", "boolean"].includes(typeof value) || value === null) fields[key] = value;
  }
  return fields;
}
