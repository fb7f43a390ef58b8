// Measuring on this GPU: the FFN megakernel switch (its correctness check and speed A/B),
// the in-page benchmark and its JSON export, and the per-kernel time chart.

import { engineHas, errorKind, errorMessage, exclusive, page, status } from "./page.js";
import { $, el, displayName, formatRate, renderPlan, renderProfile } from "./ui.js";

// Default sizes (the #bench-pp/-tg/-reps inputs start at these), chosen so a weak or
// software GPU finishes in seconds, not minutes; the upper bounds keep a link's sizes sane.
export const BENCH = { pp: 64, tg: 16, reps: 3 };
const BENCH_MAX = { pp: 4096, tg: 1024, reps: 20 };
const AB_BENCH = { pp: 8, tg: 16, reps: 2 };
// coco.profile prefills this many tokens, then times the next decode step kernel by kernel.
export const PROFILE_TOKENS = 8;
// … or times the prefill step of this many tokens itself (a chat turn's prompt).
export const PREFILL_PROFILE_TOKENS = 64;

/** Says up front which optional parts this engine build or this GPU lacks. */
export function describeOptionalParts(adapter) {
  if (!engineHas("set_megakernel")) {
    $("megakernel-result").textContent = "Not yet: this build of the engine has no FFN megakernel (coco.set_megakernel is missing).";
  }
  if (!engineHas("profile")) {
    $("profile-chart").replaceChildren(el("p", { class: "note", text: "Not yet: this build of the engine has no per-kernel profiler (coco.profile is missing)." }));
  } else if (adapter && !adapter.timestamp_query) {
    $("profile-chart").replaceChildren(el("p", { class: "note", text: "Not yet: this GPU offers no timestamp queries, so kernels can't be timed one by one." }));
  }
}

function showMegakernel(result, wanted) {
  const out = $("megakernel-result");
  const check = result.check;
  if (!wanted && !check) {
    out.textContent = "Off: the normal fused path runs.";
    out.removeAttribute("data-passed");
    return;
  }
  if (!check) {
    out.textContent = result.on ? "On (no check result was returned)." : "Off.";
    out.removeAttribute("data-passed");
    return;
  }
  out.dataset.passed = String(Boolean(check.passed));
  const numbers = `max |Δ| = ${Number(check.max_abs).toExponential(2)}, max rel = ${Number(check.max_rel).toExponential(2)} over ${check.rows} rows`;
  const verdict = check.passed
    ? result.on ? "Check passed, megakernel on" : "Check passed, megakernel off"
    : "Check FAILED: the megakernel stays off";
  out.textContent = `${verdict}: ${numbers}.${check.detail ? ` ${check.detail}` : ""}`;
}

export async function toggleMegakernel() {
  const box = $("megakernel");
  const wanted = box.checked;
  if (!engineHas("set_megakernel")) {
    box.checked = false;
    return;
  }
  $("megakernel-result").textContent = wanted ? "Checking the megakernel against the normal path…" : "Turning it off…";
  await exclusive("megakernel", async () => {
    try {
      const result = await page.engine.set_megakernel(wanted);
      box.checked = Boolean(result.on);
      showMegakernel(result, wanted);
      // The FFN steps of the plan follow the switch.
      if (engineHas("plan")) renderPlan(await page.engine.plan());
    } catch (err) {
      box.checked = false;
      $("megakernel-result").dataset.passed = "false";
      $("megakernel-result").textContent = errorMessage(err);
    }
  });
}

/** Decode speed with the megakernel off, then on, on this GPU: honest numbers, either way. */
export async function megakernelAB() {
  const out = $("megakernel-ab-result");
  const box = $("megakernel");
  const wasOn = box.checked;
  if (!engineHas("set_megakernel")) return;
  out.textContent = `Measuring: pp ${AB_BENCH.pp}, tg ${AB_BENCH.tg}, ${AB_BENCH.reps} runs each way…`;
  await exclusive("megakernel A/B", async () => {
    try {
      await page.engine.set_megakernel(false);
      const off = await page.engine.bench(AB_BENCH);
      const turnedOn = await page.engine.set_megakernel(true);
      showMegakernel(turnedOn, true);
      if (!turnedOn.on) {
        out.textContent = `Normal path: ${formatRate(off.tg_tok_s, "tok/s")} decode. Megakernel not measured: its check failed.`;
        box.checked = false;
        return;
      }
      const on = await page.engine.bench(AB_BENCH);
      const back = await page.engine.set_megakernel(wasOn);
      box.checked = Boolean(back.on);
      const ratio = on.tg_tok_s / off.tg_tok_s;
      out.textContent = `Decode on this GPU: normal ${formatRate(off.tg_tok_s, "tok/s")}, megakernel ${formatRate(on.tg_tok_s, "tok/s")} `
        + `(megakernel/normal = ${Number.isFinite(ratio) ? ratio.toFixed(2) : "–"}×, ${ratio >= 1 ? "faster" : "slower"}). `
        + `Prefill: ${formatRate(off.pp_tok_s, "tok/s")} vs ${formatRate(on.pp_tok_s, "tok/s")}.`;
    } catch (err) {
      out.textContent = `A/B not measured: ${errorMessage(err)}`;
      box.checked = false;
      try {
        await page.engine.set_megakernel(false);
      } catch {
        // already off, or the device is gone (checkLost reports that)
      }
    }
  });
}

/** The sizes in the #bench-* inputs, whole numbers in 1..BENCH_MAX (written back as used). */
function benchSizes() {
  const sizes = {};
  for (const key of Object.keys(BENCH)) {
    const input = $(`bench-${key}`);
    const n = Math.round(Number(input.value));
    sizes[key] = input.value.trim() !== "" && Number.isFinite(n) ? Math.min(BENCH_MAX[key], Math.max(1, n)) : BENCH[key];
    input.value = String(sizes[key]);
  }
  return sizes;
}

// The last benchmark in this browser (localStorage), for the bars of the next one.
const LAST_BENCH_KEY = "coco.lastBench";

function benchMessage(state, text) {
  const out = $("bench-result");
  out.dataset.state = state;
  out.replaceChildren(el("p", { class: "note", text }));
}

export async function runBench() {
  const sizes = benchSizes();
  benchMessage("running", `Running pp ${sizes.pp} / tg ${sizes.tg} × ${sizes.reps}…`);
  await exclusive("bench", async () => {
    status("Benchmarking…");
    try {
      const result = await page.engine.bench({ ...sizes, cpu_sampling: page.cpuSampling });
      // The engine names the adapter "<name> (<backend>, <type>)", and in the browser wgpu
      // leaves <name> empty; the browser's own name (as in the GPU panel) goes there, so an
      // exported result says which GPU it measured.
      if (page.adapterName && typeof result.adapter === "string" && result.adapter.startsWith(" (")) {
        result.adapter = `${page.adapterName}${result.adapter}`;
      }
      page.benchResult = result;
      renderBench(result, readLastBench());
      saveLastBench(result);
      status(`Benchmark: prefill ${formatRate(result.pp_tok_s, "tok/s")}, decode ${formatRate(result.tg_tok_s, "tok/s")} greedy, `
        + `${formatRate(result.tg_sampled_tok_s, "tok/s")} with the default sampler (sampling on the ${result.sampler_on_gpu ? "GPU" : "CPU"}).`);
    } catch (err) {
      benchMessage("failed", `Benchmark failed: ${errorMessage(err)}`);
      status("Benchmark failed.");
    }
  });
}

/** What the next run's bars compare against: the model, the sizes and the three medians. */
function saveLastBench(r) {
  const kept = {
    model: r.model, adapter: r.adapter, prompt_tokens: r.prompt_tokens, gen_tokens: r.gen_tokens, depth: r.depth,
    pp_tok_s: r.pp_tok_s, tg_tok_s: r.tg_tok_s, tg_sampled_tok_s: r.tg_sampled_tok_s, date: new Date().toISOString(),
  };
  try {
    localStorage.setItem(LAST_BENCH_KEY, JSON.stringify(kept));
  } catch {
    // storage off or full: the next run just has no bars
  }
}

function readLastBench() {
  try {
    const v = JSON.parse(localStorage.getItem(LAST_BENCH_KEY) ?? "null");
    return v && typeof v === "object" ? v : null;
  } catch {
    return null;
  }
}

/**
 * The result for people: per figure its median, the range over the runs and, when the last
 * run in this browser measured the same model with the same sizes, a bar against it. The
 * whole JSON is behind Export.
 */
function renderBench(r, last) {
  // A run saved before depths existed timed tg after its prompt: not comparable.
  const comparable = last && last.model === r.model && last.prompt_tokens === r.prompt_tokens
    && last.gen_tokens === r.gen_tokens && last.depth === r.depth;
  const range = (runs) => {
    const xs = (runs || []).filter(Number.isFinite);
    return xs.length > 1 ? `${formatRate(Math.min(...xs), "").trim()}–${formatRate(Math.max(...xs), "tok/s")}` : "—";
  };
  const versus = (now, before) => {
    if (!comparable || !(before > 0) || !(now > 0)) return el("td", { class: "muted", text: "—" });
    const ratio = now / before;
    const pct = Math.round((ratio - 1) * 100);
    // The bar spans 0–2× the last run; the mark at its middle is the last run itself.
    const bar = el("span", { class: "vs-bar", title: `${formatRate(before, "tok/s")} last time` },
      el("span", { class: `vs-fill ${ratio >= 1 ? "up" : "down"}`, style: `width: ${Math.min(100, ratio * 50).toFixed(1)}%` }));
    return el("td", { class: "vs" }, bar, el("span", { text: ` ${pct >= 0 ? "+" : ""}${pct}%` }));
  };
  const rows = [
    ["Prefill (pp)", r.prompt_tokens, r.pp_tok_s, r.pp_runs, last?.pp_tok_s],
    ["Decode, greedy (tg)", r.gen_tokens, r.tg_tok_s, r.tg_runs, last?.tg_tok_s],
    ["Decode, default sampler", r.gen_tokens, r.tg_sampled_tok_s, r.tg_sampled_runs, last?.tg_sampled_tok_s],
  ].map(([name, tokens, median, runs, before]) =>
    el("tr", { "data-figure": name },
      el("th", { scope: "row", text: `${name}, ${tokens} tokens` }),
      el("td", { class: "num", "data-median": String(median), text: formatRate(median, "tok/s") }),
      el("td", { class: "num", text: range(runs) }),
      versus(median, before)));
  const table = el("table", { class: "bench-table" },
    el("thead", {}, el("tr", {},
      ...["", "median", `range over ${r.reps} run${r.reps === 1 ? "" : "s"}`, comparable ? "vs your last run" : "vs last run"].map((h) => el("th", { scope: "col", text: h })))),
    el("tbody", {}, ...rows));
  const facts = [
    `${r.dispatches_per_token} dispatches per token`,
    Number.isFinite(r.ms_per_token) ? `${r.ms_per_token.toFixed(2)} ms per token` : null,
    Number.isFinite(r.effective_gb_s) ? `weights read at ${formatRate(r.effective_gb_s, "GB/s")}` : null,
    `sampling on the ${r.sampler_on_gpu ? "GPU" : "CPU"}`,
    r.adapter,
  ].filter(Boolean).join(" · ");
  const note = !last ? "The next run here gets bars against this one."
    : comparable ? `Bars: this run against the last one in this browser (${last.date?.slice(0, 16).replace("T", " ")} UTC); the middle mark is that run.`
      : "The last run in this browser measured another model or other sizes: not compared.";
  const out = $("bench-result");
  out.dataset.state = "done";
  out.replaceChildren(el("div", { class: "table-wrap" }, table), el("p", { class: "note", text: facts }), el("p", { class: "note", text: `${note} Export JSON has every figure.` }));
}

export function exportBench() {
  if (!page.benchResult) return;
  const blob = new Blob([`${JSON.stringify(page.benchResult, null, 2)}\n`], { type: "application/json" });
  const href = URL.createObjectURL(blob);
  const name = (page.loadedUrl ? displayName(page.loadedUrl).split(" ")[0].replace(/\.gguf$/i, "") : "model").replace(/[^\w.-]+/g, "_");
  const link = el("a", { href, download: `coco-bench-${name}-${new Date().toISOString().slice(0, 19).replace(/:/g, "")}.json` });
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(href), 10_000);
}

/** Times one `step` ("decode" or "prefill") kernel by kernel into the chart. */
export async function runProfile(step = "decode") {
  const target = $("profile-chart");
  if (!engineHas("profile")) return;
  const [tokens, what] = step === "prefill"
    ? [PREFILL_PROFILE_TOKENS, `the prefill step of ${PREFILL_PROFILE_TOKENS} prompt tokens`]
    : [PROFILE_TOKENS, `one decode step (after ${PROFILE_TOKENS} prompt tokens)`];
  target.replaceChildren(el("p", { class: "note", text: `Timing ${what} kernel by kernel…` }));
  await exclusive("profile", async () => {
    try {
      // coco.profile returns a StepProfile (www/API.md), the same object as `coco bench
      // --profile --json`'s profile or prefill_profile.
      renderProfile(await page.engine.profile(tokens, step));
    } catch (err) {
      const noteStatus = errorKind(err) === "not_yet" ? "not_yet" : "error";
      target.replaceChildren(el("p", { class: "note", "data-status": noteStatus, text: errorMessage(err) }));
    }
  });
}
