// The page's shared state: what it knows, its state machine (#app[data-state]), the status
// line and errors, and the rule that the engine runs one call at a time.

import { $ } from "./ui.js";

/** Everything the page knows. Tests read engine, state, lastStats, peakWasm, longTasks and longFrames. */
export const page = {
  engine: null,
  state: "starting",
  lastStats: null,
  peakWasm: 0, // the highest wasm heap the engine's worker reported, in bytes
  longTasks: [], // {start, duration} in ms (performance.now()) of every main-thread task > 50 ms
  longFrames: [], // every animation frame > 50 ms: its scripts' and rendering's share (below)
  presets: [],
  defaultPreset: null,
  hasModel: false, // a model is on the GPU and ready to generate
  model: null, // the loaded (or last inspected) model's shape, from the engine
  loadedUrl: null,
  loadSeconds: null,
  chat: [], // the conversation, [{role, content}]
  abort: null, // AbortController of the load in progress
  stopRequested: false,
  busy: null, // label of the engine call in flight; set only by exclusive()
  benchResult: null,
  cpuSampling: false, // a link's cpu_sampling=1: sample on the CPU (A/B, debugging)
  subgroups: undefined, // a link's subgroups=0 / 1: false / true (A/B runs); undefined: the engine decides
  attnMerge: undefined, // a link's attn_merge=separate: "separate" (A/B runs); undefined: in the split kernel
  inFlight: undefined, // a link's in_flight=1..3: decode batches kept in flight (A/B runs); undefined: the engine's 2
  gemm: undefined, // a link's gemm=tiled / 4x8 / 8x4 / 4x4 (4x8h, …: in f16): the prefill GEMM by name; matrix: Chromium's int8 subgroup matrices (experimental); undefined: by product
  attnBlocked: undefined, // a link's attn_blocked=1: the attention's 2 × 2 score blocks (A/B runs)
  adapterName: "", // the browser's name for the GPU (wgpu's browser backend reports none)
};
window.cocoPage = page;

// Main-thread tasks over 50 ms (the Long Tasks API's threshold): what makes the page janky
// while a model loads or generates. Registered as the page's first module runs; `buffered`
// adds the ones from before. Measured, never acted on (the e2e tests record them).
try {
  new PerformanceObserver((list) => {
    for (const e of list.getEntries()) page.longTasks.push({ start: e.startTime, duration: e.duration });
  }).observe({ type: "longtask", buffered: true });
} catch {
  // a browser without the Long Tasks API: page.longTasks stays empty
}
// What filled them: Chromium's Long Animation Frames API attributes a frame over 50 ms to the
// scripts that ran in it (each one's entry point and duration) and to style, layout and paint.
// A long task whose frame shows little script time was the main thread waiting for a core,
// not working (the e2e tests record both).
try {
  new PerformanceObserver((list) => {
    for (const e of list.getEntries()) {
      const scripts = [...(e.scripts ?? [])].sort((a, b) => b.duration - a.duration);
      page.longFrames.push({
        start: e.startTime,
        duration: e.duration,
        blocking: e.blockingDuration,
        script: scripts.reduce((sum, s) => sum + s.duration, 0),
        // from the start of rendering (style, layout, paint) to the frame's end
        render: e.renderStart > 0 ? e.startTime + e.duration - e.renderStart : 0,
        top: scripts.slice(0, 3).map((s) => ({
          invoker: s.invoker,
          source: `${(s.sourceURL ?? "").split("/").pop()}:${s.sourceFunctionName ?? ""}`,
          duration: s.duration,
        })),
      });
    }
  }).observe({ type: "long-animation-frame", buffered: true });
} catch {
  // a browser without the Long Animation Frames API: page.longFrames stays empty
}

// ---------------------------------------------------------------------------------------
// State, status and errors

export function setState(state) {
  page.state = state;
  $("app").dataset.state = state;
  $("webgpu-missing").hidden = state !== "no-webgpu";
  $("recover").hidden = state !== "lost";
  updateControls();
}

export function status(text) {
  $("status-text").textContent = text;
}

export function showError(message) {
  $("error").textContent = message;
  $("error-box").hidden = false;
}

export function clearError() {
  $("error").textContent = "";
  $("error-box").hidden = true;
}

/** Enables exactly the controls that make sense now. */
export function updateControls() {
  const s = page.state;
  const idle = !page.busy;
  const engineReady = page.engine && ["ready", "loaded", "not-yet", "error"].includes(s);
  // After a failed generation the page is in "error" but the model is still there.
  const canRun = (s === "loaded" || s === "error") && idle && page.hasModel;
  const chatMode = $("mode").value === "chat";
  const chatOk = !chatMode || Boolean(page.model && page.model.chat_template);
  $("load").disabled = !(engineReady && idle);
  $("cancel-load").disabled = !["inspecting", "downloading"].includes(s);
  $("send").disabled = !(canRun && chatOk);
  $("stop").disabled = s !== "generating";
  $("megakernel").disabled = !canRun || !engineHas("set_megakernel");
  $("megakernel-ab").disabled = !canRun || !engineHas("set_megakernel");
  $("bench-run").disabled = !canRun;
  $("profile-run").disabled = !canRun || !engineHas("profile");
  $("profile-prefill-run").disabled = !canRun || !engineHas("profile");
  $("bench-export").disabled = !page.benchResult;
  $("reset-chat").hidden = !chatMode;
  $("reset-chat").disabled = !(canRun || (s !== "generating" && page.chat.length));
  $("show-template").hidden = !chatMode;
  $("show-template").disabled = !(canRun && chatOk);
  $("chat-log").hidden = !chatMode;
  $("output").hidden = chatMode; // in chat mode the answer streams into the conversation
  $("cache-clear").disabled = ["inspecting", "downloading"].includes(s);
  $("send").textContent = chatMode ? "Send" : "Generate";
}

/**
 * The one guard every engine call goes through (loads, generation, benchmarks, the chat
 * template, …): one at a time, so the engine never answers "busy"; a second click while one
 * runs does nothing. Only the reads that never take the engine's state bypass it: adapter(),
 * memory(), lost(), stop() and the destroy_device() test hook, which must work while a
 * generation runs (src/web/bindings.rs). Every engine call is a Promise (www/engine.js).
 */
export async function exclusive(label, fn) {
  if (page.busy || !page.engine) return undefined;
  page.busy = label;
  updateControls();
  try {
    return await fn();
  } finally {
    page.busy = null;
    updateControls();
    await checkLost();
  }
}

/** Whether this build of the engine offers an optional part of the API. */
export function engineHas(name) {
  return Boolean(page.engine) && typeof page.engine[name] === "function";
}

/** An engine error's kind (www/API.md, PageError), a LoadError's, or null for anything else. */
export function errorKind(err) {
  return err && typeof err === "object" && typeof err.kind === "string" ? err.kind : null;
}

export function errorMessage(err) {
  if (err && typeof err === "object" && "message" in err) return String(err.message);
  return String(err);
}

/** fn()'s result, or null where it throws or rejects. */
export async function safeCall(fn) {
  try {
    return await fn();
  } catch {
    return null;
  }
}

/** Resolves true (and puts the page in state `lost`) when the engine reports a lost device. */
export async function checkLost() {
  if (!page.engine || page.state === "lost") return page.state === "lost";
  let message = null;
  try {
    message = await page.engine.lost();
  } catch {
    return false;
  }
  if (page.state === "lost") return true;
  if (!message) return false;
  page.hasModel = false;
  page.abort?.abort();
  showError(`The GPU device was lost (${message}). The model is no longer on the GPU. “Reopen” starts the engine again and reloads the model from this browser's storage, without reloading the page.`);
  status("The GPU device was lost.");
  setState("lost");
  return true;
}
