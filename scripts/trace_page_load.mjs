// What the page's main thread does while a model loads: Chromium's trace (Playwright over the
// DevTools protocol, SwiftShader WebGPU as in the e2e tests) of one load from the test server,
// then the main thread's tasks over 20 ms with the trace events inside them, longest first,
// and a CPU profile of the page's script over the same load: the page's own functions by
// inclusive time (it named `toLocaleString`'s first call, in renderModelFacts, as 17 of a
// message handler's 21 ms; BENCHMARKS.md session 28).
// The e2e tests record long tasks and frames (window.cocoPage.longTasks / longFrames); this
// shows what filled one. A by-hand diagnostic, not a test:
//
//   node scripts/trace_page_load.mjs [model URL relative to the page] [trace.json]
//
// (default: the fixture tests/fixtures/llama-spm-q4_0.gguf; needs the built page in dist/).
import fs from 'node:fs';
import { launch, loadModel, longTasksSince, openPage, pageNow, startServer } from '../tests/e2e/lib/harness.mjs';

const url = process.argv[2] ?? 'fixtures/llama-spm-q4_0.gguf';
const out = process.argv[3] ?? 'target/page-load-trace.json';
const CATEGORIES = 'toplevel,devtools.timeline,v8,blink,loading,disabled-by-default-devtools.timeline,disabled-by-default-v8.gc';

const server = await startServer();
const session = await launch({ server });
try {
  const { page, context } = session;
  await openPage(page, server);
  const cdp = await context.newCDPSession(page);
  const events = [];
  cdp.on('Tracing.dataCollected', (e) => events.push(...e.value));
  const complete = new Promise((resolve) => cdp.on('Tracing.tracingComplete', resolve));
  await cdp.send('Profiler.enable');
  await cdp.send('Profiler.setSamplingInterval', { interval: 200 }); // µs
  await cdp.send('Tracing.start', { categories: CATEGORIES, transferMode: 'ReportEvents' });
  await cdp.send('Profiler.start');
  const mark = await pageNow(page);
  await loadModel(page, url);
  const longTasks = await longTasksSince(page, mark);
  const { profile } = await cdp.send('Profiler.stop');
  await cdp.send('Tracing.end');
  await complete;
  fs.writeFileSync(out, JSON.stringify(events));
  console.log(`the page's long tasks and frames: ${JSON.stringify(longTasks)}`);
  console.log(`trace: ${out} (${events.length} events)`);

  const main = new Set(
    events.filter((e) => e.ph === 'M' && e.name === 'thread_name' && e.args?.name === 'CrRendererMain').map((e) => `${e.pid}:${e.tid}`),
  );
  const onMain = events.filter((e) => e.ph === 'X' && e.dur !== undefined && main.has(`${e.pid}:${e.tid}`));
  const t0 = Math.min(...onMain.map((e) => e.ts));
  const tasks = onMain.filter((e) => e.name === 'ThreadControllerImpl::RunTask' && e.dur > 20_000).sort((a, b) => b.dur - a.dur);
  for (const task of tasks.slice(0, 8)) {
    const inside = new Map();
    for (const e of onMain) {
      if (e !== task && e.ts >= task.ts && e.ts + e.dur <= task.ts + task.dur) inside.set(e.name, (inside.get(e.name) ?? 0) + e.dur);
    }
    const top = [...inside].sort((a, b) => b[1] - a[1]).slice(0, 6).map(([n, d]) => `${n} ${(d / 1000).toFixed(1)}`);
    console.log(`at ${((task.ts - t0) / 1000).toFixed(0)} ms: a task of ${(task.dur / 1000).toFixed(1)} ms; inside (ms): ${top.join(', ') || 'nothing traced'}`);
  }
  console.log("the page's script by inclusive time (ms), www/ files only:");
  for (const [where, ms] of pageFunctions(profile).slice(0, 12)) console.log(`${ms.toFixed(1).padStart(8)}  ${where}`);
} finally {
  await session.close();
  await server.close();
}

/** [function file:line, inclusive ms] of the profile's frames in www/, most time first. */
function pageFunctions(profile) {
  const parent = new Map();
  for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const inclusive = new Map();
  profile.samples.forEach((id, i) => {
    const ms = (profile.timeDeltas[i] ?? 0) / 1000;
    const seen = new Set(); // a recursive function counts once per sample
    for (let n = id; n !== undefined; n = parent.get(n)) {
      const f = byId.get(n).callFrame;
      if (!f.url.includes('/www/')) continue;
      const where = `${f.functionName || '(anonymous)'} ${f.url.split('/').pop()}:${f.lineNumber + 1}`;
      if (seen.has(where)) continue;
      seen.add(where);
      inclusive.set(where, (inclusive.get(where) ?? 0) + ms);
    }
  });
  return [...inclusive].sort((a, b) => b[1] - a[1]);
}
