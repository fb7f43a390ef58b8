// DOM helpers and renderers. Everything that comes from the model file, the URL, the
// engine or the visitor is put in the page as text (textContent, attributes), never parsed
// as HTML.

export const $ = (id) => document.getElementById(id);

/** Creates an element with properties / attributes and children (strings become text). */
export function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (value === undefined || value === null) continue;
    if (key === "text") node.textContent = value;
    else if (key === "class") node.className = value;
    else if (key.startsWith("data-") || key.startsWith("aria-") || key === "role" || key === "title") node.setAttribute(key, value);
    else node[key] = value;
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(typeof child === "string" ? document.createTextNode(child) : child);
  }
  return node;
}

const SVG_NS = "http://www.w3.org/2000/svg";
function svg(tag, attrs = {}, text) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, String(value));
  if (text !== undefined) node.textContent = text;
  return node;
}

// ---------------------------------------------------------------------------------------
// Formatting

/**
 * An integer with its thousands grouped by commas ("151,669"), as toLocaleString("en") writes
 * it, without Intl: a page's first toLocaleString loads ICU's number formats on the main
 * thread, 12 ms on an idle 2-core machine and a 64 ms long task under CI's contention (the
 * model facts of a load, BENCHMARKS.md session 28). Anything but an integer as String().
 */
export function groupDigits(n) {
  if (!Number.isSafeInteger(n)) return String(n);
  return String(n).replace(/\B(?=(\d{3})+(?!\d))/g, ",");
}

export function formatBytes(n) {
  if (n === null || n === undefined || !Number.isFinite(n)) return "unknown";
  const units = ["B", "KB", "MB", "GB", "TB"];
  let value = n;
  let unit = 0;
  while (value >= 1000 && unit < units.length - 1) {
    value /= 1000;
    unit += 1;
  }
  return `${value.toFixed(unit === 0 ? 0 : value < 10 ? 2 : 1)} ${units[unit]}`;
}

/** Binary units, for GPU limits (which are powers of two). */
export function formatBinary(n) {
  if (n === null || n === undefined || !Number.isFinite(n)) return "unknown";
  if (n >= 1 << 30) return `${(n / 2 ** 30).toFixed(n % 2 ** 30 ? 2 : 0)} GiB`;
  if (n >= 1 << 20) return `${(n / 2 ** 20).toFixed(n % 2 ** 20 ? 1 : 0)} MiB`;
  if (n >= 1 << 10) return `${(n / 2 ** 10).toFixed(n % 2 ** 10 ? 1 : 0)} KiB`;
  return `${n} B`;
}

export function formatSeconds(s) {
  if (s === null || s === undefined || !Number.isFinite(s)) return "–";
  if (s < 1) return `${Math.round(s * 1000)} ms`;
  if (s < 90) return `${s.toFixed(s < 10 ? 1 : 0)} s`;
  const m = Math.floor(s / 60);
  return `${m} min ${Math.round(s - m * 60)} s`;
}

export function formatRate(x, unit) {
  if (x === null || x === undefined || !Number.isFinite(x)) return "–";
  return `${x >= 100 ? x.toFixed(0) : x >= 10 ? x.toFixed(1) : x.toFixed(2)} ${unit}`;
}

/** "12.3 MB of 253 MB · 4.9% · 45.2 MB/s · 5 s left" */
export function formatProgress(p) {
  const parts = [p.total ? `${formatBytes(p.bytes)} of ${formatBytes(p.total)}` : `${formatBytes(p.bytes)} (size unknown)`];
  if (p.fraction !== null) parts.push(`${(p.fraction * 100).toFixed(1)}%`);
  parts.push(p.rate ? `${formatBytes(p.rate)}/s` : "– MB/s");
  parts.push(p.eta !== null && p.eta !== undefined ? `${formatSeconds(p.eta)} left` : "time left unknown");
  return parts.join(" · ");
}

export function setStat(name, text) {
  const node = document.querySelector(`#stats [data-stat="${name}"]`);
  if (node) node.textContent = text;
}

// ---------------------------------------------------------------------------------------
// Renderers

/** The capability report: one row per requirement, with its status and numbers. */
export function renderReport(report) {
  const body = $("report").tBodies[0];
  body.replaceChildren();
  if (!report) return;
  const label = { ok: "ok", note: "note", not_yet: "not yet", invalid: "invalid file" };
  for (const row of report.rows || []) {
    body.append(
      el("tr", { "data-status": row.status },
        el("th", { scope: "row", text: row.name }),
        el("td", { class: `badge-cell` }, el("span", { class: `badge ${row.status}`, text: label[row.status] || row.status })),
        el("td", { text: row.detail }),
      ),
    );
  }
}

function factsList(target, pairs) {
  target.replaceChildren(...pairs.filter(([, v]) => v !== undefined && v !== null && v !== "")
    .map(([k, v]) => el("div", {}, el("dt", { text: k }), el("dd", { text: String(v) }))));
}

/** The model's shape, as read from its header. */
export function renderModelFacts(model, report) {
  const target = $("model-facts");
  if (!model) {
    target.replaceChildren();
    return;
  }
  const types = Array.isArray(model.types) ? model.types.join(", ") : model.types;
  factsList(target, [
    ["Architecture", model.arch],
    ["Name", model.name],
    ["Layers × dim", `${model.layers} × ${model.dim}`],
    ["Heads (KV heads) × head dim", `${model.heads} (${model.kv_heads}) × ${model.head_dim}`],
    ["FFN", model.ffn],
    ["Vocabulary", model.vocab == null ? undefined : groupDigits(model.vocab)],
    ["Trained context", model.context_length == null ? undefined : groupDigits(model.context_length)],
    ["Weights", formatBytes(model.weight_bytes)],
    ["Weight types", types],
    ["Tensors", model.tensors],
    ["Chat template", model.chat_template ? "yes" : "no (a base model, or none in the file)"],
    ["GPU memory (estimate)", report && report.gpu_bytes ? formatBytes(report.gpu_bytes) : undefined],
  ]);
}

/**
 * The loaded model's fusion plan (coco.plan(), Loaded.plan: a FusionPlan of www/API.md):
 * which kernels each step runs on this GPU and why, one `div[data-step]` per line. Cleared
 * with `null` (another file inspected).
 */
export function renderPlan(plan) {
  const target = $("model-plan");
  if (!plan || !Array.isArray(plan.steps)) {
    target.replaceChildren();
    return;
  }
  const mode = `${plan.pipeline} pipeline${plan.megakernel ? ", FFN megakernel on" : ""}`;
  const list = el("dl", { id: "plan-steps", class: "facts" },
    plan.steps.map((s) => el("div", { "data-step": s.step }, el("dt", { text: s.step }), el("dd", { text: s.detail }))));
  target.replaceChildren(
    el("h3", { text: "Fusion plan on this GPU" }),
    el("p", { class: "note", text: `${mode}: ${plan.decode_dispatches} dispatches per decode step at position 0.` }),
    list,
  );
}

const F16_ABSENT = "This GPU offers no shader-f16. Here that costs little: f16 weights are read as packed pairs with unpack2x16float (core WGSL) and all arithmetic is f32, the same speed class and the same results as f32 math.";

/** The honest GPU panel: adapter, shader-f16, limits. */
export function renderGpuPanel(adapter) {
  const l = adapter.limits || {};
  factsList($("gpu-facts"), [
    ["Adapter", adapter.description || "(the browser gives no description)"],
    ["Vendor / architecture", [adapter.vendor, adapter.architecture].filter(Boolean).join(" / ") || "(not given)"],
    ["Backend", adapter.backend],
    ["Software (fallback) adapter", adapter.fallback ? "yes: a CPU emulates the GPU, expect slow generation" : "no"],
    ["shader-f16", adapter.shader_f16 ? (adapter.f16_used ? "present, used" : "present, not used") : "absent"],
    ["Timestamp queries", adapter.timestamp_query ? "yes (per-kernel timings work)" : "no (no per-kernel chart)"],
    ["Subgroups", `${adapter.subgroups ? "used" : "not used"}: ${adapter.subgroups_why}`],
    ["Int8 dot products", adapter.int8_dot
      ? `in this browser's WGSL: ${adapter.subgroups ? "the decode matvec reads x' as int8 levels" : "unused without subgroups"}`
      : "not yet: this browser's WGSL lacks packed_4x8_integer_dot_product (the decode matvec keeps x' in f32)"],
    ["Tensor cores (subgroup matrices)", adapter.cooperative_matrix || "(not reported)"],
    ["Max storage binding", formatBinary(l.max_storage_binding)],
    ["Max buffer", formatBinary(l.max_buffer)],
    ["Max invocations per workgroup", l.max_invocations],
    ["Workgroup storage", formatBinary(l.workgroup_storage)],
  ]);
  $("gpu-f16").textContent = adapter.shader_f16
    ? adapter.f16_used
      ? "shader-f16 is present and used for f16 arithmetic where it helps."
      : "shader-f16 is present; f16 weights are still read as packed pairs with unpack2x16float and the arithmetic is f32."
    : F16_ABSENT;
}

/**
 * The per-kernel time chart: one horizontal bar per kernel, longest first (inline SVG).
 * `profile` is what coco.profile returns: one decode step timed dispatch by dispatch
 * (timestamp queries, one pass each), averaged over `steps` steps, at KV position
 * `position`: {kernels: [{label, calls, total_us, bytes, flops (per step; bytes and flops
 * null where the kernel counts none)}], profiled_us, one_pass_us, dispatches, steps,
 * position}. A kernel that counts its bytes also shows the rate it moved them at.
 */
export function renderProfile(profile) {
  const target = $("profile-chart");
  const rows = [...(profile.kernels || [])].sort((a, b) => b.total_us - a.total_us);
  const total = rows.reduce((s, r) => s + r.total_us, 0);
  if (!rows.length || total <= 0) {
    target.replaceChildren(el("p", { class: "note", text: "The profile came back empty: the GPU reported no time for any kernel." }));
    return;
  }
  const rowHeight = 22;
  const labelWidth = 190;
  const width = 620;
  const barMax = width - labelWidth - 190;
  const max = rows[0].total_us;
  const chart = svg("svg", {
    viewBox: `0 0 ${width} ${rows.length * rowHeight + 4}`,
    role: "img",
    "aria-label": `GPU time per kernel in one ${profile.tokens > 1 ? "prefill" : "decode"} step`,
    class: "profile-svg",
  });
  rows.forEach((r, i) => {
    const y = i * rowHeight + 2;
    const w = Math.max(1, (r.total_us / max) * barMax);
    const g = svg("g", { "data-label": r.label, "data-us": r.total_us });
    const rate = rateText(r);
    g.append(
      svg("title", {}, `${r.label}: ${r.total_us.toFixed(1)} µs per step in ${r.calls} dispatch${r.calls === 1 ? "" : "es"}${rate ? `, ${rate}` : ""}`),
      svg("text", { x: labelWidth - 6, y: y + 15, "text-anchor": "end", class: "chart-label" }, truncate(r.label, 26)),
      svg("rect", { x: labelWidth, y: y + 3, width: w, height: rowHeight - 6, rx: 2, class: "chart-bar" }),
      svg("text", { x: labelWidth + w + 6, y: y + 15, class: "chart-value" },
        `${formatMicros(r.total_us)} · ${((r.total_us / total) * 100).toFixed(1)}%${rate ? ` · ${rate}` : ""}`),
    );
    chart.append(g);
  });
  // Timing each dispatch needs a pass of its own, which costs more than the real one-pass
  // step: both sums are shown so the chart's shares aren't read as the step's real time.
  const onePass = Number.isFinite(profile.one_pass_us) ? `; the same step in one pass (as it really runs): ${formatMicros(profile.one_pass_us)}` : "";
  const step = profile.tokens > 1
    ? `One prefill step of ${profile.tokens} tokens`
    : `One decode step at position ${profile.position ?? "?"}`;
  target.replaceChildren(
    el("p", {
      class: "note",
      text: `${step} (mean of ${profile.steps ?? "?"} steps), from timestamp queries: `
        + `${formatMicros(total)} summed over ${profile.dispatches ?? rows.length} dispatches timed one pass each${onePass}.`,
    }),
    chart,
  );
}

/** The rate of a profile row that counts its work, else "": TFLOP/s where it does more than
 * 10 operations per byte (a product of many tokens), GB/s otherwise (one token's matvec). */
function rateText(r) {
  if (!(r.total_us > 0) || r.bytes == null) return "";
  const gbs = r.bytes / (r.total_us * 1e3);
  const tflops = r.flops == null ? 0 : r.flops / (r.total_us * 1e6);
  // Three significant digits: a software adapter's rates are thousandths of a GPU's.
  return tflops > gbs / 100 ? `${tflops.toPrecision(3)} TFLOP/s` : `${gbs.toPrecision(3)} GB/s`;
}

function formatMicros(us) {
  return us >= 1000 ? `${(us / 1000).toFixed(2)} ms` : `${us.toFixed(1)} µs`;
}

function truncate(text, n) {
  return text.length > n ? `${text.slice(0, n - 1)}…` : text;
}

/** The cached-models list, each with its size and a delete button. */
export function renderCacheList(entries, onDelete) {
  const list = $("cache-list");
  if (!entries.length) {
    list.replaceChildren(el("li", { class: "note", text: "Nothing kept yet. A model you load is kept here, so the next load needs no network." }));
    return;
  }
  list.replaceChildren(...entries.map((e) => {
    const remove = el("button", { type: "button", class: "small", text: "Delete", "aria-label": `Delete ${e.url}` });
    remove.addEventListener("click", () => onDelete(e.url));
    return el("li", { "data-url": e.url },
      el("span", { class: "cache-name mono", text: displayName(e.url), title: e.url }),
      el("span", { class: "cache-size", text: formatBytes(e.bytes) }),
      el("span", { class: "cache-hash mono", text: e.sha256 ? `sha256 ${e.sha256.slice(0, 12)}…` : "", title: e.sha256 || "" }),
      remove);
  }));
}

export function displayName(url) {
  try {
    const u = new URL(url, location.href);
    const file = u.pathname.split("/").pop() || u.pathname;
    return u.origin === location.origin ? file : `${file} (${u.host})`;
  } catch {
    return url;
  }
}
