"""The page on a real GPU: opens coco's page in headless Chromium (WebGPU through Dawn on the
device's Vulkan driver), follows share links that load the model, run the in-page benchmark
and generate, and writes one JSON line per page visit. python3 + aiohttp only (the device has
no node); the browser is driven over the DevTools protocol.

  python3 page_bench.py --base http://127.0.0.1:8080/ --model /models/gemma-3-270m-q4_k_m.gguf \
      --runs 2 --out DIR [--variant auto --variant subgroups=0]

Per run and variant, two visits in a fresh browser each:
  bench:    temp 0 / top-k 1, the in-page benchmark (pp/tg, reps) and a greedy generation;
  sampled:  the page's default sampler settings, a 128-token generation (what a visitor runs),
            then the same again in the same page.
After the bench visit's generation, one decode step is profiled kernel by kernel.
Long main-thread tasks are recorded with a PerformanceObserver from the first script on.
"""
import argparse, asyncio, base64, json, os, shutil, statistics, subprocess, tempfile, time, urllib.parse

import aiohttp

CHROME = os.environ.get("CHROME", "/opt/chr/chromium/chromium-headless-shell")
# What made Chromium 156 offer the H200 (not SwiftShader) to WebGPU, found 2026-12-01: Dawn on
# NVIDIA's Vulkan driver, Chromium's own GL through ANGLE on NVIDIA's EGL, no GPU compositing
# or raster (with them, the GPU process crashed), no Vulkan surface (headless, none exists).
FLAGS = [
    "--headless", "--no-sandbox", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--disable-quic", "--disable-breakpad",
    "--window-size=1280,1600", "--enable-logging=stderr",
    "--enable-unsafe-webgpu", "--enable-features=Vulkan,WebGPUDeveloperFeatures",
    "--use-vulkan=native", "--use-gl=angle", "--use-angle=gl-egl", "--disable-gpu-compositing",
    "--disable-gpu-rasterization", "--disable-vulkan-surface", "--ignore-gpu-blocklist",
    "--disable-gpu-sandbox",
]
# A dry run on the dev box (no GPU): Chromium's own SwiftShader adapter.
DRY_RUN_FLAGS = FLAGS[:10] + ["--enable-unsafe-webgpu", "--disable-gpu-sandbox"]


def browser_flags(a, dawn=True):
    """The flag set, plus Dawn toggles where asked (and `dawn`): Dawn withholds `shader-f16`
    from NVIDIA's Vulkan driver (crbug.com/42251215, driver bugs) unless
    `vulkan_enable_f16_on_nvidia` is on, which a benchmark may set to run the f16 kernels on
    this GPU; no visitor has it. The variant `no-dawn-features` is the same page without them."""
    flags = list(DRY_RUN_FLAGS if a.dry_run else FLAGS)
    if a.dawn_features and dawn:
        flags.append(f"--enable-dawn-features={a.dawn_features}")
    return flags


PROMPT = "The capital of France is"
# About 128 Gemma tokens of plain prose: wllama's prompt (it reports the exact count).
LONG_PROMPT = (
    "A river runs through the old town, and every morning the bakers open their doors before the "
    "sun comes up over the hills. The market square fills with farmers who bring apples, cheese, "
    "bread and flowers from the villages around, and the children walk to school along the water, "
    "counting the boats that pass under the stone bridges. In the afternoon the cafes are full of "
    "people reading newspapers, talking about the weather and the prices, and the church bells ring "
    "every hour. When the evening comes, the lamps along the river are lit one by one, musicians "
    "play in the squares, and the town slowly goes quiet until the next day begins again with bread.")
# Long tasks with their start times, and a timeline of the page's states and status lines,
# so a long task can be placed against what the page was doing (ms since navigation).
LONG_TASKS = """window.__longTasks = []; window.__longTaskAt = []; window.__timeline = [];
new PerformanceObserver((list) => { for (const e of list.getEntries()) {
  window.__longTasks.push(Math.round(e.duration));
  window.__longTaskAt.push([Math.round(e.startTime), Math.round(e.duration)]); } })
  .observe({ type: 'longtask', buffered: true });
document.addEventListener('DOMContentLoaded', () => {
  const note = () => { const st = document.getElementById('app')?.dataset.state;
    const tx = (document.getElementById('status-text')?.textContent || '').slice(0, 80);
    const last = window.__timeline[window.__timeline.length - 1];
    if (!last || last[1] !== st || last[2] !== tx) window.__timeline.push([Math.round(performance.now()), st, tx]); };
  new MutationObserver(note).observe(document.body, { subtree: true, childList: true, attributes: true, characterData: true });
  note(); });"""
# Done when the page shows an error state, or the generation has finished (and, with a
# benchmark, its result is there). The page asks before a large download: confirm.
DONE = """(() => { const st = document.getElementById('app')?.dataset.state;
  if (['error', 'lost', 'not-yet', 'no-webgpu'].includes(st)) return 'state:' + st;
  if (st === 'confirm') { document.getElementById('confirm-ok')?.click(); return false; }
  const br = document.getElementById('bench-result')?.textContent || '';
  if (br.startsWith('Benchmark failed')) return 'bench-failed';
  const p = window.cocoPage, s = p?.lastStats;
  const benchDone = !WANT_BENCH || !!p?.benchResult;
  return st === 'loaded' && benchDone && s && Array.isArray(s.ids) ? 'ok' : false; })()"""
SECOND = """(() => { window.cocoPage.lastStats.__first = true; document.getElementById('send').click(); return true; })()"""
SECOND_DONE = """(() => { const p = window.cocoPage, s = p?.lastStats;
  return document.getElementById('app')?.dataset.state === 'loaded' && s && !s.__first && Array.isArray(s.ids); })()"""
# adapter() and memory() answer from the engine's worker: promises, awaited here (a Promise
# itself serializes as {}, which is all session 36's run recorded of them).
FACTS = """(async () => { const p = window.cocoPage; const s = p.lastStats || {};
  const { ids, text, ...stats } = s;
  return { adapter: await p.engine.adapter(), memory: await p.engine.memory(), bench: p.benchResult,
           stats: { ...stats, n_ids: ids ? ids.length : 0 }, text: text ?? null,
           long_tasks_ms: window.__longTasks, long_tasks_at: window.__longTaskAt,
           timeline: (window.__timeline || []).slice(0, 200), adapter_name: p.adapterName,
           status: document.getElementById('status-text')?.textContent }; })()"""


class Browser:
    """One Chromium with its own profile, attached to its first page over CDP."""

    def __init__(self, port, log, flags):
        self.port, self.log, self.flags, self.next_id, self.pending = port, log, flags, 0, {}
        self.console = []

    async def __aenter__(self):
        self.profile = tempfile.mkdtemp(prefix="coco-chr-")
        self.proc = subprocess.Popen(
            [CHROME, *self.flags, f"--remote-debugging-port={self.port}", f"--user-data-dir={self.profile}", "about:blank"],
            stdout=self.log, stderr=subprocess.STDOUT)
        self.http = aiohttp.ClientSession()
        for _ in range(150):
            if self.proc.poll() is not None:
                raise RuntimeError(f"chromium exited with {self.proc.returncode}")
            try:
                async with self.http.get(f"http://127.0.0.1:{self.port}/json/list") as r:
                    pages = [t for t in await r.json() if t.get("type") == "page"]
                if pages:
                    break
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.2)
        else:
            raise RuntimeError("no DevTools endpoint after 30 s")
        self.ws = await self.http.ws_connect(pages[0]["webSocketDebuggerUrl"], max_msg_size=0)
        self.reader = asyncio.create_task(self._read())
        await self.call("Runtime.enable")
        await self.call("Page.enable")
        return self

    async def __aexit__(self, *exc):
        self.reader.cancel()
        await self.ws.close()
        await self.http.close()
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        shutil.rmtree(self.profile, ignore_errors=True)

    async def _read(self):
        async for msg in self.ws:
            d = json.loads(msg.data)
            if "id" in d:
                fut = self.pending.pop(d["id"], None)
                if fut and not fut.done():
                    fut.set_result(d)
            elif d.get("method") == "Runtime.consoleAPICalled":
                args = d["params"].get("args", [])
                self.console.append(" ".join(str(a.get("value", a.get("description", ""))) for a in args)[:500])
            elif d.get("method") == "Runtime.exceptionThrown":
                self.console.append("exception: " + json.dumps(d["params"]["exceptionDetails"])[:500])

    async def call(self, method, timeout=60, **params):
        self.next_id += 1
        fut = asyncio.get_running_loop().create_future()
        self.pending[self.next_id] = fut
        await self.ws.send_json({"id": self.next_id, "method": method, "params": params})
        reply = await asyncio.wait_for(fut, timeout)
        if "error" in reply:
            raise RuntimeError(f"{method}: {reply['error']}")
        return reply.get("result", {})

    async def evaluate(self, expression, timeout=60):
        r = await self.call("Runtime.evaluate", timeout=timeout, expression=expression,
                            awaitPromise=True, returnByValue=True)
        if "exceptionDetails" in r:
            raise RuntimeError(json.dumps(r["exceptionDetails"])[:1000])
        return r["result"].get("value")

    async def wait_for(self, expression, timeout):
        deadline = time.time() + timeout
        while time.time() < deadline:
            v = await self.evaluate(expression)
            if v:
                return v
            await asyncio.sleep(0.25)
        raise TimeoutError(f"page not done after {timeout} s")


async def visit(a, port, query, want_bench, screenshot=None, dawn=True):
    url = a.base + "?" + urllib.parse.urlencode(query, quote_via=urllib.parse.quote)
    rec = {"url": url}
    t0 = time.time()
    with open(os.path.join(a.out, "logs.txt"), "ab") as log:
        async with Browser(port, log, browser_flags(a, dawn)) as b:
            try:
                await b.call("Page.addScriptToEvaluateOnNewDocument", source=LONG_TASKS)
                await b.call("Page.navigate", url=url)
                rec["done"] = await b.wait_for(DONE.replace("WANT_BENCH", "true" if want_bench else "false"), a.timeout)
                rec.update(await b.evaluate(FACTS))
                if want_bench:
                    # One decode step kernel by kernel (timestamp queries), as `coco bench --profile`.
                    rec["profile"] = await b.evaluate("window.cocoPage.engine.profile(128)", timeout=a.timeout)
                    # And the benchmark's prefill step (--pp tokens): per-kernel GB/s and TFLOP/s in the browser
                    # beside native `coco bench --profile`'s prefill_profile.
                    rec["prefill_profile"] = await b.evaluate(f"window.cocoPage.engine.profile({a.pp}, 'prefill')", timeout=a.timeout)
                    # The f32 FMA ceiling through the browser's compiler (`coco probe` natively).
                    rec["compute_probe"] = await b.evaluate("window.cocoPage.engine.probe()", timeout=a.timeout)
                else:
                    # The same generation again in the same page: a visitor's second one.
                    await b.evaluate(SECOND)
                    await b.wait_for(SECOND_DONE, a.timeout)
                    rec["second"] = await b.evaluate(FACTS)
                if screenshot:
                    shot = await b.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)
                    with open(os.path.join(a.out, screenshot), "wb") as f:
                        f.write(base64.b64decode(shot["data"]))
                    rec["screenshot"] = screenshot
            except Exception as e:  # the record says what failed; the next visit still runs
                rec["error"] = str(e)[:2000]
                try:
                    rec["state"] = await b.evaluate("document.getElementById('app')?.dataset.state")
                    rec["status"] = await b.evaluate("document.getElementById('status-text')?.textContent")
                except Exception:
                    pass
            rec["console"] = b.console[-40:]
    rec["wall_s"] = round(time.time() - t0, 2)
    return rec


async def wllama_visit(a, port):
    """wllama's own greedy completions on the same file, in the same browser build."""
    rec = {"engine": "wllama", "url": a.wllama}
    t0 = time.time()
    with open(os.path.join(a.out, "logs.txt"), "ab") as log:
        async with Browser(port, log, browser_flags(a)) as b:
            try:
                await b.call("Page.navigate", url=a.wllama)
                await b.wait_for("window.__ready === true", 60)
                cfg = {"model": a.wllama_model, "prompt": LONG_PROMPT, "tokens": a.tokens, "reps": a.reps}
                rec.update(await b.evaluate(f"window.runWllama({json.dumps(cfg)})", timeout=a.timeout * 3))
            except Exception as e:
                rec["error"] = str(e)[:2000]
                try:
                    rec["log_tail"] = (await b.evaluate("window.__logs") or [])[-30:]
                except Exception:
                    pass
            rec["console"] = b.console[-20:]
    rec["wall_s"] = round(time.time() - t0, 2)
    return rec


def summary(records):
    """Medians per variant and visit kind: in-page pp/tg, and the generations' decode tok/s."""
    out = {}
    for r in records:
        if r.get("engine") == "wllama":
            w = out.setdefault("wllama", {"prefill": [], "decode": [], "errors": 0})
            if "error" in r:
                w["errors"] += 1
            for rep in r.get("reps") or []:
                for k, f in (("prefill", "prefill_tok_s"), ("decode", "decode_tok_s")):
                    if isinstance(rep.get(f), (int, float)):
                        w[k].append(rep[f])
            continue
        key = f"{r['variant']}/{r['kind']}"
        s = out.setdefault(key, {"pp": [], "tg": [], "tg_sampled": [], "gen_decode": [], "second_gen_decode": [], "longest_task_ms": [], "errors": 0})
        if "error" in r:
            s["errors"] += 1
            continue
        bench = r.get("bench") or {}
        for name, field in (("pp", "pp_tok_s"), ("tg", "tg_tok_s"), ("tg_sampled", "tg_sampled_tok_s")):
            if isinstance(bench.get(field), (int, float)):
                s[name].append(bench[field])
        if isinstance(r["stats"].get("decode_tok_s"), (int, float)):
            s["gen_decode"].append(r["stats"]["decode_tok_s"])
        second = (r.get("second") or {}).get("stats") or {}
        if isinstance(second.get("decode_tok_s"), (int, float)):
            s["second_gen_decode"].append(second["decode_tok_s"])
        s["longest_task_ms"].append(max(r.get("long_tasks_ms") or [0]))
    for s in out.values():
        for k in ("prefill", "decode"):
            if k in s:
                s[k] = {"median": statistics.median(s[k]), "min": min(s[k]), "max": max(s[k])} if s[k] else None
        if "pp" not in s:
            continue
        for k in ("pp", "tg", "tg_sampled", "gen_decode", "second_gen_decode"):
            s[k] = {"median": statistics.median(s[k]), "min": min(s[k]), "max": max(s[k])} if s[k] else None
        s["longest_task_ms"] = max(s["longest_task_ms"], default=None)
    return out


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", default="http://127.0.0.1:8080/")
    ap.add_argument("--model", default="/models/gemma-3-270m-q4_k_m.gguf")
    ap.add_argument("--variant", action="append", help="auto, or a link parameter such as subgroups=0")
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--pp", type=int, default=128)
    ap.add_argument("--tg", type=int, default=128)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--bench-prompt", choices=["short", "long"], default="short",
                    help="the bench visit's greedy generation after the short prompt (the "
                         "matvec prefills it) or the ~128-token one (the prefill GEMM does): "
                         "its text, compared across variants, checks the GEMM a variant runs")
    ap.add_argument("--timeout", type=float, default=120)
    ap.add_argument("--out", required=True)
    ap.add_argument("--wllama", help="URL of wllama.html: also run wllama on the same file")
    ap.add_argument("--wllama-model", default="/m/gemma-3-270m-q4_k_m.gguf")
    ap.add_argument("--dawn-features", help="Dawn toggles to enable, e.g. vulkan_enable_f16_on_nvidia")
    ap.add_argument("--dry-run", action="store_true", help="SwiftShader flags, to try the script on a machine without a GPU")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    records, port = [], 9300
    for run in range(a.runs):
        for variant in a.variant or ["auto"]:
            extra = dict([variant.split("=", 1)]) if "=" in variant else {}
            common = {"model": a.model, "mode": "complete", "prompt": PROMPT, "max": str(a.tokens), **extra}
            visits = [
                ("bench", {**common, "temp": "0", "top_k": "1", "rep": "1", "bench": "1",
                           **({"prompt": LONG_PROMPT} if a.bench_prompt == "long" else {}),
                           "bench_pp": str(a.pp), "bench_tg": str(a.tg), "bench_reps": str(a.reps)}, True),
                ("sampled", common, False),
            ]
            for kind, query, want_bench in visits:
                port += 1
                # One screenshot (the device tool brings back 8 files a call): what a visitor sees.
                shot = "page.png" if (run, variant, kind) == (0, "auto", "sampled") else None
                rec = await visit(a, port, query, want_bench, shot, dawn=variant != "no-dawn-features")
                rec.update(run=run, variant=variant, kind=kind)
                records.append(rec)
                with open(os.path.join(a.out, "page.jsonl"), "a") as f:
                    f.write(json.dumps(rec) + "\n")
                b, s = rec.get("bench") or {}, rec.get("stats") or {}
                print(f"{variant:12} {kind:8} run {run}: pp {b.get('pp_tok_s')} tg {b.get('tg_tok_s')} "
                      f"tg sampled {b.get('tg_sampled_tok_s')} | "
                      f"generation {s.get('n_ids')} tokens at {s.get('decode_tok_s')} tok/s "
                      f"(again: {((rec.get('second') or {}).get('stats') or {}).get('decode_tok_s')}) | "
                      f"subgroups {(rec.get('adapter') or {}).get('subgroups')} | {rec.get('error', 'ok')[:200]}", flush=True)
    for run in range(a.runs if a.wllama else 0):
        port += 1
        rec = await wllama_visit(a, port)
        rec["run"] = run
        records.append(rec)
        with open(os.path.join(a.out, "page.jsonl"), "a") as f:
            f.write(json.dumps(rec) + "\n")
        reps = rec.get("reps") or []
        print(f"wllama run {run}: decode {[r.get('decode_tok_s') for r in reps]} prefill {[r.get('prefill_tok_s') for r in reps]} "
              f"webgpu {rec.get('webgpu_supported')} threads {rec.get('n_threads')} | {rec.get('error', 'ok')[:200]}", flush=True)
    s = summary(records)
    with open(os.path.join(a.out, "page-summary.json"), "w") as f:
        json.dump(s, f, indent=1)
    print(json.dumps(s, indent=1))


if __name__ == "__main__":
    asyncio.run(main())
