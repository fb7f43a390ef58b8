// Loading a model by URL, in the engine's worker (www/engine_worker.js `load_url`): where the
// bytes come from (the Cache API copy, or the network with its header probe first), every
// byte into the engine and into the cache copy, the sha256 checks, and the cache entry.
//
// It runs in the worker, not on the page, so the response body is loaded and its chunks
// become garbage on the worker's thread: on the page's thread Blink's completion of the body
// and V8's sweeps of its ArrayBuffers blocked the main thread for 49-266 ms (BENCHMARKS.md,
// session 27). The page gets events (`emit`) and the result, and keeps all of the UI.

import {
  CacheWriter, LoadError, byteSource, cacheAvailable, deleteCached, readCached, readHeader,
  writeCacheMeta,
} from "./download.js";

// Progress events are sent at most this often (the page redraws its bar on each).
const PROGRESS_MS = 100;

/**
 * Loads `url` into `coco` (a Coco, already open). `pushChunk(chunk)` hands one chunk to the
 * engine. `emit(event)` tells the page what happens:
 *   {kind: "source", cached, total}    where the bytes come from (total may be null)
 *   {kind: "header", result}           the header probe's Inspection (network loads only)
 *   {kind: "streaming", cached, total} load_begin ran: the bulk of the file follows
 *   {kind: "progress", bytes, total}   bytes the engine has taken so far
 *   {kind: "streamed", bytes}          every byte is in; load_finish follows
 *   {kind: "resume", resume, at, reason}  a dropped connection is being resumed
 *
 * → {status: "not_yet", result} when the header says this GPU can't run it (nothing more was
 * downloaded), else {status: "ok", done (load_finish's Loaded), received, cached, kept}, where
 * kept is {stored: true} or {stored: false, reason, quotaExceeded, bytes, storage} (storage:
 * the origin's {usage, quota} after the refusal, or null). Throws a LoadError (or the engine's
 * PageError) after undoing what it began: the engine's partial load, the stream, the cache
 * copy.
 */
export async function loadUrl(coco, pushChunk, url, { context, expectedSha256 = null }, signal, emit) {
  const load = { plan: null, writer: null, began: false };
  try {
    load.plan = await planSource(coco, url, context, signal, emit);
    if (load.plan.result.status === "not_yet") {
      load.plan.reader?.cancel?.().catch(() => {});
      return { status: "not_yet", result: load.plan.result };
    }
    const { done, received } = await stream(coco, pushChunk, url, context, signal, emit, load);
    const kept = await verifyAndKeep(url, expectedSha256, load, done, received);
    return { status: "ok", done, received, cached: load.plan.cached, kept };
  } catch (err) {
    await undo(coco, url, load);
    throw err;
  }
}

/** Step 1: the cached copy, or the network's header read and its verdict. */
async function planSource(coco, url, context, signal, emit) {
  const cached = await readCached(url);
  if (cached) {
    // No download to protect, so no separate header probe: load_push runs the same check
    // first (and refuses with its report), and the wasm heap is spared a second parse of the
    // header (the probe's copy of the prefix and its vocabulary).
    emit({ kind: "source", cached: true, total: cached.meta.bytes });
    return {
      result: { status: "ok", report: null, model: null }, buffered: [], reader: cached.response.body.getReader(),
      done: false, total: cached.meta.bytes, cached: true, meta: cached.meta, rangeSupported: false,
    };
  }
  emit({ kind: "source", cached: false, total: null });
  const plan = await readHeader(url, coco, context, signal);
  emit({ kind: "header", result: plan.result });
  if (plan.result.status === "invalid") {
    plan.reader?.cancel?.().catch(() => {});
    throw new LoadError(`This is not a GGUF file coco can read: ${plan.result.error}`, "invalid_file");
  }
  return plan;
}

/** Step 2: every byte into the engine and the cache copy; → load_finish's result. */
async function stream(coco, pushChunk, url, context, signal, emit, load) {
  const { plan } = load;
  await coco.load_begin(context, plan.total ?? undefined);
  load.began = true;
  emit({ kind: "streaming", cached: plan.cached, total: plan.total });
  if (!plan.cached) {
    load.writer = await CacheWriter.open(url, plan.total).catch(() => null);
    load.writerRefused = load.writer === null && cacheAvailable();
  }
  let received = 0;
  let lastEmit = 0;
  const onResume = (e) => emit({ kind: "resume", ...e });
  for await (const chunk of byteSource(url, plan, signal, onResume)) {
    if (signal.aborted) throw new LoadError("cancelled", "cancelled");
    pushChunk(chunk);
    // The engine copied what it needs; the cache's stream takes the chunk itself.
    load.writer?.write(chunk);
    received += chunk.length;
    const now = performance.now();
    if (now - lastEmit > PROGRESS_MS) {
      lastEmit = now;
      emit({ kind: "progress", bytes: received, total: plan.total });
    }
  }
  if (signal.aborted) throw new LoadError("cancelled", "cancelled");
  emit({ kind: "streamed", bytes: received });
  const done = await coco.load_finish();
  load.began = false;
  return { done, received };
}

/** Step 3: the sha256 the engine computed against the kept copy and the preset; the cache entry. */
async function verifyAndKeep(url, expectedSha256, load, done, received) {
  const { plan } = load;
  const sameHash = (a, b) => String(a).toLowerCase() === String(b).toLowerCase();
  if (plan.cached && !sameHash(done.sha256, plan.meta.sha256)) {
    await deleteCached(url);
    throw new LoadError(`The kept copy failed its integrity check (sha256 ${done.sha256.slice(0, 16)}… instead of ${plan.meta.sha256.slice(0, 16)}…) and was deleted. Load again to download it.`, "integrity");
  }
  if (expectedSha256 && !sameHash(done.sha256, expectedSha256)) {
    throw new LoadError(`The downloaded file is not the expected one (sha256 ${done.sha256.slice(0, 16)}…, expected ${expectedSha256.slice(0, 16)}…); it was not kept.`, "integrity");
  }
  if (plan.cached) return { stored: true, fromCache: true };
  if (!load.writer) {
    return { stored: false, reason: load.writerRefused ? "the browser's storage could not be opened" : "no Cache API: the page is not on https or localhost" };
  }
  const writer = load.writer;
  load.writer = null;
  if (!(await writer.commit())) {
    return {
      stored: false, reason: errorText(writer.failed), quotaExceeded: writer.failed?.name === "QuotaExceededError",
      bytes: received, storage: await storageEstimate(),
    };
  }
  await writeCacheMeta(url, {
    bytes: received, sha256: done.sha256, etag: plan.validators?.etag || null,
    last_modified: plan.validators?.lastModified || null, date: new Date().toISOString(),
  });
  return { stored: true, fromCache: false };
}

/** Undoes what a failed load left: the engine's partial load, the stream, the cache copy. */
async function undo(coco, url, load) {
  if (load.began) {
    try {
      await coco.load_cancel();
    } catch {
      // the loader may already be gone; nothing more to free
    }
  }
  load.plan?.reader?.cancel?.().catch(() => {});
  if (load.writer) await load.writer.abort().catch(() => {});
  else if (!load.plan?.cached) await deleteCached(url).catch(() => {});
}

/** This origin's {usage, quota} in bytes as the browser estimates them, or null. */
async function storageEstimate() {
  try {
    const { usage, quota } = await navigator.storage.estimate();
    return Number.isFinite(quota) ? { usage: usage ?? 0, quota } : null;
  } catch {
    return null;
  }
}

function errorText(err) {
  return err && err.message ? err.message : String(err ?? "unknown error");
}
