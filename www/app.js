// The coco page: opens the engine (src/web/, in a Web Worker: www/engine.js), loads a
// model (www/download.js), generates, shows the numbers, and shares runs (www/share.js).
//
// The contract with the engine and with the tests is www/API.md. The page's states are
// `#app[data-state]`: starting, no-webgpu, ready, inspecting, confirm, downloading, loaded,
// generating, not-yet, error, lost.

import {
  ProgressMeter, cacheAvailable, clearCache, deleteCached, listCached, probeSize, readCached,
} from "./download.js";
import { buildShareUrl, checkModelUrl, readShareParams, FIELD_PARAMS } from "./share.js";
import {
  $, el, displayName, formatBytes, formatProgress, formatRate, formatSeconds, renderCacheList,
  renderGpuPanel, renderModelFacts, renderPlan, renderReport, setStat,
} from "./ui.js";
import {
  checkLost, clearError, engineHas, errorKind, errorMessage, exclusive, page, safeCall, setState,
  showError, status, updateControls,
} from "./page.js";
import { openEngine as startEngine } from "./engine.js";
import {
  BENCH, PREFILL_PROFILE_TOKENS, PROFILE_TOKENS, describeOptionalParts, exportBench, megakernelAB, runBench, runProfile,
  toggleMegakernel,
} from "./measure.js";

// A share link loads without a click only the same-origin default model, and only while
// the server says it is at most this big (a swapped file can't make a link pull gigabytes).
// Every other model waits for the visitor to say yes in #confirm, whatever its size.
const AUTO_LOAD_MAX_BYTES = 300_000_000;
const MIN_CONTEXT = 64;
const MAX_CONTEXT = 131072;
const POLL_MS = 1000;

// ---------------------------------------------------------------------------------------
// Start-up: theme, presets, the link, the engine

function initTheme() {
  let stored = null;
  try {
    stored = localStorage.getItem("coco-theme");
  } catch {
    // storage may be off; the system preference still applies
  }
  const root = document.documentElement;
  const system = matchMedia("(prefers-color-scheme: dark)");
  let chosen = stored === "dark" || stored === "light" ? stored : null;
  const button = $("theme");
  // data-theme is always set (the visitor's choice, else the system's), so style.css holds
  // each palette once.
  const apply = () => {
    const theme = chosen ?? (system.matches ? "dark" : "light");
    root.dataset.theme = theme;
    button.textContent = theme === "dark" ? "Light theme" : "Dark theme";
    button.setAttribute("aria-pressed", String(theme === "dark"));
  };
  button.addEventListener("click", () => {
    chosen = root.dataset.theme === "dark" ? "light" : "dark";
    try {
      localStorage.setItem("coco-theme", chosen);
    } catch {
      // not remembered, still applied
    }
    apply();
  });
  system.addEventListener("change", apply);
  apply();
}

const FALLBACK_PRESETS = {
  default: "gemma-3-270m",
  models: [{ id: "gemma-3-270m", label: "Gemma 3 270M, base model, Q4_K_M (this site)", url: "models/gemma-3-270m-q4_k_m.gguf", verified: true }],
};

async function loadPresets() {
  let data = FALLBACK_PRESETS;
  try {
    const res = await fetch("www/models.json");
    if (!res.ok) throw new Error(`HTTP ${res.status}`);
    data = await res.json();
  } catch (err) {
    showError(`The model list (www/models.json) did not load (${errorMessage(err)}); only the default model is offered.`);
  }
  page.presets = data.models || [];
  page.defaultPreset = page.presets.find((m) => m.id === data.default) || page.presets[0];
  const select = $("model-preset");
  select.replaceChildren(
    ...page.presets.map((m) => el("option", { value: m.id, text: m.label })),
    el("option", { value: "custom", text: "Any URL…" }),
  );
  select.value = page.defaultPreset.id;
  $("model-url").value = page.defaultPreset.url;
  describePreset();
}

function presetFor(url) {
  const check = checkModelUrl(url);
  if (!check.ok) return null;
  return page.presets.find((m) => checkModelUrl(m.url).url === check.url) || null;
}

function describePreset() {
  const preset = presetFor($("model-url").value);
  const note = $("model-note");
  if (!preset) {
    note.textContent = "Any GGUF file the browser may read: same site, or a server that sends Access-Control-Allow-Origin (Hugging Face does).";
    return;
  }
  const parts = [];
  if (preset.notes) parts.push(preset.notes);
  if (preset.verified === false) parts.push("File name and size written offline, unverified here; the real size is read from the server first.");
  note.textContent = parts.join(" ");
}

/** Puts a share link's values into the form, as text. */
function restoreLink(link) {
  if (link.problems.length) showError(`Parts of the link were not used: ${link.problems.join("; ")}.`);
  if (link.model) {
    $("model-url").value = link.model;
    const preset = presetFor(link.model);
    $("model-preset").value = preset ? preset.id : "custom";
    describePreset();
  }
  if (link.mode) $("mode").value = link.mode;
  if (link.prompt !== undefined) $("prompt").value = link.prompt;
  for (const [id, value] of Object.entries(link.fields)) $(id).value = value;
  for (const [id, value] of Object.entries(link.benchFields)) $(id).value = value;
  if (link.chat) {
    page.chat = link.chat;
    renderChatLog();
  }
  if (link.megakernel !== undefined) $("megakernel").checked = link.megakernel;
  if (link.cpuSampling !== undefined) page.cpuSampling = link.cpuSampling;
  if (link.subgroups !== undefined) page.subgroups = link.subgroups;
  if (link.attnMerge !== undefined) page.attnMerge = link.attnMerge;
  if (link.inFlight !== undefined) page.inFlight = link.inFlight;
  if (link.gemm !== undefined) page.gemm = link.gemm;
  if (link.attnBlocked !== undefined) page.attnBlocked = link.attnBlocked;
}

/**
 * wgpu's browser backend leaves the adapter's name and vendor empty; the browser's own
 * GPUAdapterInfo has them (vendor, architecture, description). Asking for an adapter
 * creates no device, so this is only a look.
 */
async function withBrowserAdapterInfo(adapter) {
  try {
    const info = (await navigator.gpu.requestAdapter())?.info;
    if (!info) return adapter;
    const described = [info.description, info.device].filter(Boolean).join(" ");
    return {
      ...adapter,
      description: described || [info.vendor, info.architecture].filter(Boolean).join(" ") || adapter.description,
      vendor: adapter.vendor || info.vendor,
      architecture: adapter.architecture || info.architecture,
    };
  } catch {
    return adapter;
  }
}

/** Opens the engine on this browser's GPU; says plainly when there is none. */
async function openEngine() {
  if (!navigator.gpu) {
    $("webgpu-missing-reason").textContent = "navigator.gpu is missing: this browser has WebGPU off, or doesn't have it.";
    status("Not yet: no WebGPU in this browser.");
    setState("no-webgpu");
    return false;
  }
  status("Starting the engine…");
  try {
    // A link's subgroups=0 / 1 turns them off / on wherever granted (A/B runs); otherwise
    // the engine decides. attn_merge=separate: the two-dispatch attention merge; in_flight=N:
    // decode batches kept in flight; gemm=…: the prefill GEMM by name; attn_blocked=1: the
    // attention's 2 × 2 score blocks (www/API.md).
    page.engine = await startEngine({
      subgroups: page.subgroups, attention_merge: page.attnMerge, batches_in_flight: page.inFlight, gemm: page.gemm,
      attention_blocked: page.attnBlocked,
    });
  } catch (err) {
    const message = errorMessage(err);
    // Kind "not_yet": a setting of the link this GPU can't run (`setting`), no adapter or
    // device (Coco.open), or no module workers or no WebGPU inside them (www/engine.js says
    // which in `reason`).
    if (errorKind(err) === "not_yet" && err.setting) {
      // WebGPU works; a setting the link asked for doesn't on this GPU (www/API.md, PageError).
      showError(`${message}. Remove ${err.setting}= from the link, or pick what the message names.`);
      status(`Not yet on this GPU: the link's ${err.setting}= setting.`);
      setState("error");
    } else if (errorKind(err) === "not_yet") {
      $("webgpu-missing-reason").textContent = message;
      const why = {
        no_module_worker: "Not yet: this browser can't start the module Web Worker coco runs its engine in.",
        no_webgpu_in_worker: "Not yet: this browser offers WebGPU to the page but not to Web Workers, where coco runs.",
      };
      status(why[err.reason] ?? "Not yet: this browser offers WebGPU but no usable GPU adapter.");
      setState("no-webgpu");
    } else {
      showError(`The engine did not start: ${message}`);
      status("The engine did not start.");
      setState("error");
    }
    return false;
  }
  try {
    const adapter = await withBrowserAdapterInfo(await page.engine.adapter());
    page.adapterName = adapter.description || "";
    renderGpuPanel(adapter);
    describeOptionalParts(adapter);
  } catch (err) {
    $("gpu-facts").replaceChildren(el("p", { class: "note", text: `The adapter could not be described: ${errorMessage(err)}` }));
  }
  await pollMemory();
  return true;
}

// ---------------------------------------------------------------------------------------
// Loading a model

function readContext() {
  const n = Math.round(Number($("context").value));
  const context = Number.isFinite(n) && n > 0 ? Math.min(MAX_CONTEXT, Math.max(MIN_CONTEXT, n)) : 2048;
  $("context").value = String(context);
  return context;
}

// The memory() call in flight, so a slow answer (the worker busy with a chunk) is shared
// rather than queued again on every progress update.
let memoryAsked = null;

/** Asks the engine's worker for its wasm heap and GPU memory and shows them. */
function pollMemory() {
  if (!page.engine) return Promise.resolve();
  memoryAsked ??= showMemory(page.engine).finally(() => {
    memoryAsked = null;
  });
  return memoryAsked;
}

async function showMemory(engine) {
  try {
    const m = await engine.memory();
    // The worker's wasm memory: the engine's whole heap (the page itself runs no wasm).
    page.peakWasm = Math.max(page.peakWasm, m.wasm_bytes || 0, m.wasm_peak_bytes || 0);
    setStat("wasm", formatBytes(m.wasm_bytes));
    setStat("wasm-peak", formatBytes(page.peakWasm));
    // null while a generation holds the engine: keep the last figure.
    if (m.gpu_bytes !== null && m.gpu_bytes !== undefined) setStat("gpu", formatBytes(m.gpu_bytes));
  } catch {
    // memory() is informative only; a lost device is reported by checkLost
  }
}

/** Shows what `inspect` (or the finished load) said about the model and this GPU. */
function showInspection(result) {
  renderReport(result.report);
  renderModelFacts(result.model, result.report);
  renderPlan(result.plan || null);
  page.model = result.model || null;
  const summary = $("report-summary");
  if (result.status === "not_yet") {
    const blockers = (result.report?.rows || []).filter((r) => r.status === "not_yet");
    summary.textContent = `Not yet on this GPU: ${blockers.map((r) => `${r.name}: ${r.detail}`).join("; ")}. Nothing more was downloaded.`;
  } else if (result.status === "invalid" && result.report) {
    summary.textContent = `This file is broken, not unsupported: ${result.error}. Nothing more was downloaded.`;
  } else if (result.status === "ok") {
    const gpu = result.report?.gpu_bytes ? ` It needs about ${formatBytes(result.report.gpu_bytes)} of GPU memory.` : "";
    summary.textContent = `This GPU can run this model.${gpu}`;
  }
  updateChatAvailability();
}

function updateProgress(p) {
  $("progress").value = p.fraction ?? 0;
  if (p.fraction === null) $("progress").removeAttribute("value"); // indeterminate
  $("progress-text").textContent = formatProgress(p);
}

/**
 * Loads `rawUrl` into the engine, as one engine call (`exclusive`). The engine's worker does
 * the load itself (www/model_load.js): the probe (the cached copy when there is a complete
 * one, else the header over the network and its report), the stream of every byte into GPU
 * buffers and the cache copy, the integrity check and the cache entry; the cache never keeps
 * a partial file. This thread gets its events and keeps the page up to date.
 */
async function loadModel(rawUrl) {
  const check = checkModelUrl(rawUrl);
  if (!check.ok) {
    showError(check.reason);
    return;
  }
  await exclusive("load", async () => {
    clearError();
    renderReport(null);
    $("report-summary").textContent = "Reading the header…";
    page.abort = new AbortController();
    const url = check.url;
    const engine = page.engine;
    const onEvent = loadEvents(url);
    setState("inspecting");
    try {
      const options = { context: readContext(), expected_sha256: presetFor(url)?.sha256 || null };
      const result = await engine.load_url(url, options, { signal: page.abort.signal, onEvent });
      if (result.status === "not_yet") {
        status("Not yet: this model can't run on this GPU; see the report. Nothing more was downloaded.");
        setState("not-yet");
        return;
      }
      await pollMemory();
      await finishLoad(url, engine, result);
    } catch (err) {
      await loadFailed(engine, err);
    } finally {
      page.abort = null;
      refreshCacheList();
    }
  });
}

/** What the page does with each of load_url's events (www/model_load.js lists them). */
function loadEvents(url) {
  let meter = null;
  return (event) => {
    switch (event.kind) {
      case "source":
        if (event.cached) {
          status(`Reading ${displayName(url)} from this browser's storage (no network)…`);
          $("report-summary").textContent = "Checked as the kept copy loads…";
        } else {
          status(`Reading the header of ${displayName(url)}…`);
        }
        break;
      case "header":
        showInspection(event.result);
        break;
      case "streaming":
        setState("downloading");
        status(event.cached ? "Loading from this browser's storage (no network)…" : `Downloading ${displayName(url)} into the GPU…`);
        // load_begin dropped whatever model was loaded before.
        page.hasModel = false;
        meter = new ProgressMeter(event.total);
        break;
      case "progress":
        if (!meter) break;
        updateProgress(meter.update(event.bytes));
        pollMemory();
        break;
      case "streamed": {
        if (!meter) break;
        const p = meter.update(event.bytes);
        updateProgress(p);
        $("progress-text").textContent = `${formatBytes(event.bytes)} in ${formatSeconds(p.elapsed)}`
          + (p.elapsed > 0 ? ` (${formatBytes(event.bytes / p.elapsed)}/s)` : "");
        break;
      }
      case "resume":
        status(`The connection dropped at ${formatBytes(event.at)}; resuming (attempt ${event.resume} of 3)…`);
        break;
      default:
        break;
    }
  };
}

/** After load_url's "ok": the kernels compiled, the numbers and the report shown. */
/**
 * Why the browser did not keep the copy, in words. A spent quota is a QuotaExceededError, but
 * Chromium's Cache.put reports a full disk as a bare "network error": where the storage
 * estimate shows the file can't fit, that is called full too, with the numbers.
 */
function keptRefusal({ reason, quotaExceeded, bytes, storage }) {
  const free = storage ? Math.max(0, storage.quota - storage.usage) : null;
  const estimate = free === null ? "" : `the browser estimates ${formatBytes(free)} of its ${formatBytes(storage.quota)} free`;
  const tooBig = free !== null && bytes > free;
  if (!quotaExceeded && !tooBig) return estimate ? `${reason}; ${estimate}` : reason;
  // (The estimate only where it agrees: a quota set through DevTools leaves it at the disk's.)
  return `the browser's storage for this site is full: the file needs ${formatBytes(bytes)}${tooBig ? `, ${estimate}` : ""}; it said "${reason}"`;
}

async function finishLoad(url, engine, { done, cached, kept }) {
  let keptNote = "";
  if (cached) keptNote = " from this browser's storage";
  else if (kept.stored) keptNote = "; kept in this browser for next time";
  else keptNote = `; not kept (${keptRefusal(kept)})`;

  // The browser compiles a kernel when it first runs: do that now, not in the first
  // generation (it made a fresh page's first generation decode at half speed).
  status("Compiling the GPU kernels…");
  const warmSeconds = await engine.warm_up();
  page.hasModel = true;
  page.loadedUrl = url;
  page.loadSeconds = done.load_seconds;
  if (done.report) showInspection({ status: "ok", report: done.report, model: done.model, plan: done.plan });
  else page.model = done.model;
  renderPlan(done.plan || null);
  setStat("load", `${formatSeconds(done.load_seconds)}${cached ? " (from storage)" : " (network)"}`);
  $("progress").value = 1;
  status(`Loaded ${displayName(url)} in ${formatSeconds(done.load_seconds)}${keptNote}; kernels compiled in ${formatSeconds(warmSeconds)}.`);
  setState("loaded");
  // The megakernel is off on a fresh model; the checkbox follows.
  $("megakernel").checked = false;
  if (engineHas("set_megakernel")) {
    $("megakernel-result").textContent = "";
    $("megakernel-result").removeAttribute("data-passed");
  }
}

/** Says why a load failed, by kind; the worker has already undone what the load began. */
async function loadFailed(engine, err) {
  // An engine error is a PageError (www/API.md), a load's carries a LoadError's kind;
  // anything else without a kind is a bug here.
  const e = { kind: errorKind(err) ?? "internal", message: errorMessage(err) };
  if (await checkLost()) return;
  if (e.kind === "cancelled") {
    status(page.hasModel ? "Cancelled; the model loaded before is still there." : "Cancelled; nothing was kept.");
    $("progress-text").textContent = "Cancelled.";
    setState(page.hasModel ? "loaded" : "ready");
  } else if (e.kind === "not_yet") {
    // Without Range the header check ran inside load_push; its report is kept for us.
    const refused = engineHas("load_report") ? await safeCall(() => engine.load_report()) : null;
    if (refused) renderReport(refused);
    $("report-summary").textContent = e.message;
    status(e.message);
    setState("not-yet");
  } else {
    if (!$("report").tBodies[0].rows.length) $("report-summary").textContent = "No report: the file's header could not be read.";
    showError(e.message);
    status("The model did not load.");
    setState("error");
  }
}

function cancelLoad() {
  page.abort?.abort();
}

// ---------------------------------------------------------------------------------------
// Generation

function readOptions() {
  const num = (id, fallback) => {
    const v = Number($(id).value);
    return $(id).value.trim() !== "" && Number.isFinite(v) ? v : fallback;
  };
  return {
    temperature: Math.max(0, num("temperature", 0.8)),
    top_k: Math.max(0, Math.round(num("top-k", 40))),
    top_p: Math.min(1, Math.max(0, num("top-p", 0.95))),
    min_p: Math.min(1, Math.max(0, num("min-p", 0.05))),
    repeat_penalty: Math.max(0, num("repeat-penalty", 1.1)),
    seed: Math.max(0, Math.min(4294967295, Math.round(num("seed", 42)))),
    max_tokens: Math.max(1, Math.round(num("max-tokens", 128))),
    cpu_sampling: page.cpuSampling,
  };
}

function updateChatAvailability() {
  const note = $("chat-note");
  const chatOption = $("mode").querySelector('option[value="chat"]');
  const noTemplate = page.model && !page.model.chat_template;
  chatOption.disabled = Boolean(noTemplate) && $("mode").value !== "chat";
  note.hidden = !noTemplate;
  note.textContent = noTemplate ? "Chat: not yet: this GGUF has no chat template (it is a base model). Use “Complete text”." : "";
  updateControls();
}

function renderChatLog() {
  $("chat-log").replaceChildren(...page.chat.map((m) => chatItem(m.role, m.content)));
}

function chatItem(role, content) {
  const body = el("div", { class: "chat-text", text: content });
  return el("li", { class: `chat-msg ${role}`, "data-role": role }, el("span", { class: "chat-role", text: role }), body);
}

/** Streams tokens into a text node and keeps live numbers; returns the on_token callback. */
function tokenSink(target) {
  const text = document.createTextNode("");
  target.append(text);
  let count = 0;
  let first = null;
  let lastUi = 0;
  return (piece) => {
    text.appendData(piece);
    count += 1;
    const now = performance.now();
    if (first === null) first = now;
    if (count > 2 && now - lastUi > 150) {
      lastUi = now;
      const rate = ((count - 1) / (now - first)) * 1000;
      setStat("decode", `${formatRate(rate, "tok/s")} (live)`);
      setStat("ms", `${(1000 / rate).toFixed(1)} ms (live)`);
    }
    // Returning false asks the engine to stop (Esc or the stop button).
    return !page.stopRequested;
  };
}

function renderStats(stats) {
  setStat("prefill", `${formatRate(stats.prefill_tok_s, "tok/s")} (${stats.prompt_tokens - (stats.reused_tokens || 0)} tokens)`);
  setStat("decode", `${formatRate(stats.decode_tok_s, "tok/s")} (${stats.generated_tokens} tokens)`);
  setStat("ms", Number.isFinite(stats.ms_per_token) ? `${stats.ms_per_token.toFixed(2)} ms` : "–");
  setStat("dispatches", String(stats.dispatches_per_token ?? "–"));
  setStat("sampling", `${stats.sampler_on_gpu ? "GPU" : "CPU (cpu_sampling=1)"}, up to ${stats.steps_per_submit} steps per submit`);
  setStat("tokens", `${stats.prompt_tokens} (${stats.reused_tokens || 0} reused)`);
  const why = { eos: "end of text", max_tokens: "max tokens", stopped: "stopped by you", context_full: "context full" };
  setStat("stop", why[stats.stop] || String(stats.stop ?? "–"));
  return pollMemory();
}

/**
 * Generate (complete mode) or take a chat turn. With replay (a link's conversation that
 * ends with the visitor's message), the conversation is answered as it stands.
 */
async function send({ replay = false } = {}) {
  if (!["loaded", "error"].includes(page.state) || page.busy || !page.hasModel) return;
  const chatMode = $("mode").value === "chat";
  const promptText = $("prompt").value;
  if (chatMode) {
    if (!page.model?.chat_template) return;
    const last = page.chat[page.chat.length - 1];
    if (replay && last && last.role === "user") {
      // answer the restored conversation; the prompt box keeps its text
    } else if (promptText.trim()) {
      page.chat.push({ role: "user", content: promptText });
      $("prompt").value = "";
    } else if (!last || last.role !== "user") {
      status("Type a message first.");
      return;
    }
    renderChatLog();
    // The rendered template showed the conversation before this turn: stale from here on.
    $("template-view").hidden = true;
  } else if (!promptText) {
    status("Type a prompt first.");
    return;
  }

  const options = readOptions();
  clearError();
  page.stopRequested = false;
  await exclusive("generate", async () => {
    setState("generating");
    status("Generating… (Esc stops)");
    for (const name of ["prefill", "decode", "ms", "dispatches", "sampling", "tokens", "stop"]) setStat(name, "…");
    let target;
    if (chatMode) {
      const item = chatItem("assistant", "");
      $("chat-log").append(item);
      target = item.querySelector(".chat-text");
    } else {
      $("output").replaceChildren();
      target = $("output");
    }
    const onToken = tokenSink(target);
    try {
      const stats = chatMode
        ? await page.engine.chat(page.chat, options, onToken)
        : await page.engine.generate(promptText, options, onToken);
      if (chatMode) page.chat.push({ role: "assistant", content: stats.text });
      page.lastStats = stats;
      await renderStats(stats);
      status(`Done: ${stats.generated_tokens} tokens at ${formatRate(stats.decode_tok_s, "tok/s")}.`);
      setState("loaded");
    } catch (err) {
      if (chatMode) {
        // Take the turn back so the conversation stays as it was before it.
        target.closest("li")?.remove();
        const last = page.chat[page.chat.length - 1];
        if (!replay && last && last.role === "user" && promptText.trim()) {
          page.chat.pop();
          $("prompt").value = promptText;
          renderChatLog();
        }
      }
      if (!(await checkLost())) {
        showError(`Generation failed: ${errorMessage(err)}`);
        status("Generation failed; the model is still loaded.");
        setState("error");
      }
    }
  });
}

function stop() {
  if (page.state === "generating") {
    page.stopRequested = true;
    // Straight to the worker, which checks it before its next token; on_token returning
    // false says the same, but only once the next token has reached the page.
    page.engine?.stop();
    status("Stopping…");
  }
}

function resetChat() {
  page.chat = [];
  renderChatLog();
  $("template-view").hidden = true;
  status("New conversation.");
  updateControls();
  if (!page.hasModel) return;
  // While a call runs the engine is not told (exclusive does nothing then); the next chat
  // turn prefills only what differs from the cache anyway.
  exclusive("reset", async () => {
    try {
      await page.engine.reset();
    } catch (err) {
      showError(`Reset failed: ${errorMessage(err)}`);
    }
  });
}

async function showTemplate() {
  const view = $("template-view");
  // Hidden until this render arrives, so what stays on screen from an earlier click (an older
  // conversation) is never taken for the current one.
  view.hidden = true;
  const messages = [...page.chat];
  if ($("prompt").value.trim()) messages.push({ role: "user", content: $("prompt").value });
  await exclusive("template", async () => {
    try {
      view.textContent = await page.engine.render_chat(messages);
    } catch (err) {
      view.textContent = errorMessage(err);
    }
    view.hidden = false;
  });
}

// ---------------------------------------------------------------------------------------
// Device loss

async function recover() {
  if (page.state !== "lost") return;
  status("Reopening the GPU…");
  clearError();
  const old = page.engine;
  page.engine = null;
  window.cocoPage.engine = null;
  try {
    // Ends the old engine's worker: its wasm memory and its (lost) device go with it.
    await old?.free?.();
  } catch {
    // the old engine's memory goes with the page either way
  }
  setState("starting");
  if (!(await openEngine())) return;
  setState("ready");
  $("megakernel").checked = false;
  if (page.loadedUrl) await loadModel(page.loadedUrl);
}

// ---------------------------------------------------------------------------------------
// Share links

function currentShareState() {
  const fields = {};
  for (const [, id] of FIELD_PARAMS) fields[id] = $(id).value.trim();
  const mode = $("mode").value;
  // The conversation without its last answer: that answer is what the link reproduces.
  const chat = [...page.chat];
  if (chat.length && chat[chat.length - 1].role === "assistant") chat.pop();
  return { model: $("model-url").value.trim(), mode, prompt: $("prompt").value, chat, fields, megakernel: $("megakernel").checked, cpuSampling: page.cpuSampling, subgroups: page.subgroups, attnMerge: page.attnMerge, inFlight: page.inFlight, gemm: page.gemm, attnBlocked: page.attnBlocked };
}

async function copyLink() {
  const href = buildShareUrl(currentShareState());
  const box = $("share-url");
  box.value = href;
  try {
    await navigator.clipboard.writeText(href);
    status("Link copied.");
  } catch {
    box.focus();
    box.select();
    status("The link is selected below: copy it with Ctrl+C / ⌘C.");
  }
}

/** Asks before a link downloads a model; resolves true when the visitor says yes. */
async function confirmDownload(check) {
  const dialog = $("confirm");
  $("confirm-host").textContent = check.sameOrigin ? `${check.host} (this site)` : check.host;
  $("confirm-url").textContent = check.url;
  $("confirm-size").textContent = "asking the server…";
  setState("confirm");
  dialog.returnValue = "";
  const closed = new Promise((resolve) => dialog.addEventListener("close", () => resolve(dialog.returnValue === "ok"), { once: true }));
  dialog.showModal();
  const size = new AbortController();
  readCached(check.url)
    .then((cached) => (cached ? { bytes: cached.meta.bytes, kept: true } : probeSize(check.url, size.signal).then((bytes) => ({ bytes }))))
    .then(({ bytes, kept }) => {
      $("confirm-size").textContent = kept
        ? `${formatBytes(bytes)}, already kept in this browser (no download)`
        : bytes ? formatBytes(bytes) : "unknown: the server did not say";
    })
    .catch(() => {
      $("confirm-size").textContent = "unknown: the server could not be asked (it may not allow this page to read it)";
    });
  const ok = await closed;
  size.abort();
  setState("ready");
  return ok;
}

/** Runs a share link: load (after confirmation unless it's the small same-origin default), then generate. */
async function runLink(link) {
  if (!link.model) return;
  const check = checkModelUrl(link.model);
  if (!check.ok) return;
  const isDefault = page.defaultPreset && check.url === checkModelUrl(page.defaultPreset.url).url;
  let needsClick = !isDefault;
  if (isDefault && !(await readCached(check.url))) {
    const bytes = await probeSize(check.url).catch(() => null);
    needsClick = bytes === null || bytes > AUTO_LOAD_MAX_BYTES;
  }
  if (needsClick && !(await confirmDownload(check))) {
    status("The link's model was not loaded (you cancelled). Its settings are filled in.");
    return;
  }
  await loadModel(check.url);
  if (page.state !== "loaded") return;
  if (link.megakernel) {
    $("megakernel").checked = true;
    await toggleMegakernel();
  }
  if (link.bench) await runBench();
  if ($("mode").value === "chat") {
    const last = page.chat[page.chat.length - 1];
    if (last && last.role === "user") await send({ replay: true });
    else if ($("prompt").value.trim()) await send();
  } else if ($("prompt").value) {
    await send();
  }
}

// ---------------------------------------------------------------------------------------
// Cache list

async function refreshCacheList() {
  if (!cacheAvailable()) {
    $("cache-usage").textContent = "This browser offers no Cache API here (the page must be on https or localhost), so models are downloaded every time.";
    renderCacheList([], () => {});
    return;
  }
  try {
    const entries = await listCached();
    renderCacheList(entries, async (url) => {
      await deleteCached(url);
      refreshCacheList();
    });
    const total = entries.reduce((s, e) => s + (e.bytes || 0), 0);
    let usage = `${entries.length} model${entries.length === 1 ? "" : "s"}, ${formatBytes(total)}.`;
    if (navigator.storage?.estimate) {
      const est = await navigator.storage.estimate();
      if (est.quota) usage += ` This site may store up to about ${formatBytes(est.quota)} here.`;
    }
    $("cache-usage").textContent = usage;
  } catch (err) {
    $("cache-usage").textContent = `The kept models could not be listed: ${errorMessage(err)}`;
  }
}

// ---------------------------------------------------------------------------------------
// Wiring

function wire() {
  $("model-preset").addEventListener("change", () => {
    const preset = page.presets.find((m) => m.id === $("model-preset").value);
    if (preset) $("model-url").value = preset.url;
    else $("model-url").focus();
    describePreset();
  });
  $("model-url").addEventListener("input", () => {
    const preset = presetFor($("model-url").value);
    $("model-preset").value = preset ? preset.id : "custom";
    describePreset();
  });
  $("load").addEventListener("click", () => loadModel($("model-url").value));
  $("cancel-load").addEventListener("click", cancelLoad);
  $("send").addEventListener("click", send);
  $("stop").addEventListener("click", stop);
  $("prompt").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      send();
    }
  });
  document.addEventListener("keydown", (e) => {
    if (e.key === "Escape" && page.state === "generating") {
      e.preventDefault();
      stop();
    }
  });
  $("mode").addEventListener("change", () => {
    $("template-view").hidden = true;
    updateChatAvailability();
  });
  $("reset-chat").addEventListener("click", resetChat);
  $("show-template").addEventListener("click", showTemplate);
  $("megakernel").addEventListener("change", toggleMegakernel);
  $("megakernel-ab").addEventListener("click", megakernelAB);
  $("bench-run").addEventListener("click", runBench);
  $("bench-export").addEventListener("click", exportBench);
  $("profile-run").addEventListener("click", () => runProfile("decode"));
  $("profile-prefill-run").addEventListener("click", () => runProfile("prefill"));
  $("copy-link").addEventListener("click", copyLink);
  $("recover").addEventListener("click", recover);
  $("cache-clear").addEventListener("click", async () => {
    await clearCache();
    refreshCacheList();
  });
  // The defaults; a link's bench_pp / bench_tg / bench_reps replace them in restoreLink.
  $("bench-pp").value = String(BENCH.pp);
  $("bench-tg").value = String(BENCH.tg);
  $("bench-reps").value = String(BENCH.reps);
  $("profile-run").textContent = `Profile a decode step (after ${PROFILE_TOKENS} tokens)`;
  $("profile-prefill-run").textContent = `Profile a prefill step (${PREFILL_PROFILE_TOKENS} tokens)`;
  // Device loss can happen at any time (driver reset, tab in background on mobile, the
  // test hook); the engine reports it through lost(), checked between calls.
  setInterval(async () => {
    if (page.busy || !page.engine) return;
    if (!(await checkLost())) pollMemory();
  }, POLL_MS);
}

async function main() {
  initTheme();
  wire();
  await loadPresets();
  const link = readShareParams();
  restoreLink(link);
  updateChatAvailability();
  refreshCacheList();
  if (!(await openEngine())) return;
  status("Ready. Pick a model and press Load.");
  setState("ready");
  await runLink(link);
}

main().catch((err) => {
  showError(`The page failed to start: ${errorMessage(err)}`);
  setState("error");
});
