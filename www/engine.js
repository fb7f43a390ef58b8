// The page's handle on the engine, which runs in a module Web Worker (www/engine_worker.js):
// the same method names as the wasm `Coco` (www/API.md), each returning a Promise. Errors
// arrive as the Errors the engine threw, PageError fields (`kind`, numbers) included.
//
// The wasm module is never instantiated on the page's own thread. Trunk writes the URLs of
// the module it built into the page (Trunk.toml `pattern_script`: a JSON block with id
// "coco-engine-files"), and the worker imports them from there.

const WORKER_URL = new URL("./engine_worker.js", import.meta.url);
// Loading and compiling a few MB of wasm and opening the GPU; past this, say so instead of
// waiting forever.
const OPEN_TIMEOUT_MS = 60_000;

/** An Error shaped like the engine's PageError (www/API.md), for the page's own refusals. */
function pageError(kind, message, extra = {}) {
  return Object.assign(new Error(message), { name: "PageError", kind, message, ...extra });
}

/** Rebuilds the Error the worker sent as fields (engine_worker.js errorFields). */
function errorFrom(fields) {
  const { name, message, stack, ...rest } = fields ?? {};
  const err = new Error(message ?? "the engine failed without a message");
  err.name = name ?? "Error";
  if (stack) err.stack = stack;
  return Object.assign(err, rest);
}

/** Where Trunk put the wasm-bindgen glue and the .wasm, resolved against the page. */
function engineFiles() {
  const block = document.getElementById("coco-engine-files");
  if (!block) throw pageError("internal", "the page names no engine files (#coco-engine-files is missing: build it with trunk)");
  const files = JSON.parse(block.textContent);
  return { js: new URL(files.js, document.baseURI).href, wasm: new URL(files.wasm, document.baseURI).href };
}

/**
 * Whether `new Worker(url, {type: "module"})` is understood: a browser that knows the
 * option reads it (the getter runs); an older one ignores it and would load the worker as a
 * classic script, which fails on its first `import`.
 */
function moduleWorkersSupported() {
  if (typeof Worker === "undefined") return false;
  let read = false;
  const probe = {
    get type() {
      read = true;
      return "module";
    },
  };
  try {
    // The options are read before the URL is parsed, and this URL does not parse: nothing
    // starts, the constructor throws.
    new Worker("http://[", probe).terminate();
  } catch {
    // expected; the getter has answered
  }
  return read;
}

/**
 * Starts the worker, loads the wasm there and opens the GPU (Coco.open's `options`).
 * Throws a PageError: kind "not_yet" when this browser has no module workers or no WebGPU in
 * them (`reason` "no_module_worker" | "no_webgpu_in_worker"), or whatever Coco.open threw.
 */
export async function openEngine(options) {
  if (!moduleWorkersSupported()) {
    throw pageError("not_yet", "no module Web Workers: coco runs its engine in a module worker, and this browser can't start one", { reason: "no_module_worker" });
  }
  const files = engineFiles();
  let worker;
  try {
    worker = new Worker(WORKER_URL, { type: "module", name: "coco engine" });
  } catch (err) {
    throw pageError("not_yet", `no module Web Workers: this browser refused to start the engine's worker (${err?.message ?? err})`, { reason: "no_module_worker" });
  }
  const engine = new Engine(worker);
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(pageError("internal", `the engine's worker did not start within ${OPEN_TIMEOUT_MS / 1000} s`)), OPEN_TIMEOUT_MS);
  });
  try {
    const { methods } = await Promise.race([engine.call("open", [options, files]), timeout]);
    engine.offer(methods);
    return engine;
  } catch (err) {
    worker.terminate();
    throw err;
  } finally {
    clearTimeout(timer);
  }
}

/**
 * One engine in one worker. Every method of the wasm `Coco` that the worker reported becomes
 * a method here (so `typeof engine.profile === "function"` still says whether this build has
 * it), plus stop() and free().
 */
class Engine {
  constructor(worker) {
    this.worker = worker;
    this.nextId = 1;
    // id → {resolve, reject, onToken, onEvent, callbackError}
    this.calls = new Map();
    this.failure = null;
    worker.onmessage = (event) => this.receive(event.data);
    // A worker that fails to load (its script, a syntax error) or dies fails every call
    // still waiting, instead of leaving it pending forever.
    worker.onerror = (event) => {
      event.preventDefault?.();
      this.fail(pageError("internal", `the engine's worker failed: ${event.message || "it could not be loaded"}`));
    };
    worker.onmessageerror = () => this.fail(pageError("internal", "a message from the engine's worker could not be read"));
  }

  /** Adds a method per engine method name; the special ones keep their own definitions. */
  offer(methods) {
    for (const name of methods) {
      if (name in this) continue;
      this[name] = (...args) => this.call(name, args);
    }
  }

  /** `onStart(id)` runs once the call has its id (a load's cancel needs it). */
  call(method, args, { onToken = null, onEvent = null, onStart = null } = {}) {
    if (this.failure) return Promise.reject(this.failure);
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.calls.set(id, { resolve, reject, onToken, onEvent, callbackError: null });
      try {
        this.worker.postMessage({ type: "call", id, method, args });
        onStart?.(id);
      } catch (err) {
        this.calls.delete(id);
        reject(err);
      }
    });
  }

  receive(message) {
    const call = this.calls.get(message?.id);
    if (!call) return;
    if (message.type === "token") {
      this.token(message, call);
      return;
    }
    if (message.type === "event") {
      this.event(message, call);
      return;
    }
    if (message.type !== "result") return;
    this.calls.delete(message.id);
    // The page's own on_token threw: that exception is the call's result, as it was when
    // the engine called on_token directly.
    if (call.callbackError) call.reject(call.callbackError.error);
    else if (!message.ok) call.reject(errorFrom(message.error));
    else call.resolve(message.value);
  }

  /**
   * Hands a generated piece to the page's on_token. Every piece is handed on, also ones the
   * worker made before a stop reached it, so the page shows exactly the text the result has.
   */
  token({ id, piece, token }, call) {
    if (call.callbackError || !call.onToken) return;
    try {
      if (call.onToken(piece, token) === false) this.worker.postMessage({ type: "stop", id });
    } catch (error) {
      call.callbackError = { error };
      this.worker.postMessage({ type: "stop", id });
    }
  }

  /**
   * Hands a load event to the page's onEvent. What it throws is kept as the call's result
   * (as a throwing on_token's is) and cancels the load.
   */
  event({ id, event }, call) {
    if (call.callbackError || !call.onEvent) return;
    try {
      call.onEvent(event);
    } catch (error) {
      call.callbackError = { error };
      this.worker.postMessage({ type: "stop", id });
    }
  }

  fail(err) {
    this.failure = err;
    for (const call of this.calls.values()) call.reject(err);
    this.calls.clear();
  }

  /**
   * Loads the model at `url` (absolute) in the worker: download or cache, engine, cache copy,
   * sha256 checks (www/model_load.js; `options` {context, expected_sha256?}). `onEvent(event)`
   * gets its events; aborting `signal` cancels it (the result is then a LoadError of kind
   * "cancelled"). → {status: "ok", done, received, cached, kept} | {status: "not_yet", result}.
   */
  load_url(url, options, { signal = null, onEvent = null } = {}) {
    const onStart = (id) => {
      const cancel = () => {
        if (!this.failure) this.worker.postMessage({ type: "stop", id });
      };
      if (signal?.aborted) cancel();
      else signal?.addEventListener("abort", cancel, { once: true });
    };
    return this.call("load_url", [url, options], { onEvent, onStart });
  }

  /** on_token(piece, id) may return false to stop; what it throws is rethrown as it is. */
  generate(prompt, options, onToken) {
    return this.call("generate", [prompt, options], { onToken });
  }

  chat(messages, options, onToken) {
    return this.call("chat", [messages, options], { onToken });
  }

  /** Asks every running generation to stop at its next token (the Stop button, Esc). */
  stop() {
    if (!this.failure) this.worker.postMessage({ type: "stop" });
    return Promise.resolve();
  }

  /** Ends the worker, and with it the engine's wasm memory and GPU device. */
  free() {
    this.fail(pageError("gpu_lost", "the engine was closed"));
    this.worker.terminate();
    return Promise.resolve();
  }
}
