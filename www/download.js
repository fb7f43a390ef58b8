// Getting a GGUF file's bytes to the engine: header first (Range requests that grow),
// then one ordered byte stream for the bulk (resumed with Range after a drop), with a copy
// kept in the Cache API and a metadata record that lets a later load verify it.
//
// The load runs in the engine's worker (www/model_load.js drives these pieces there); the
// page imports only the cache list's helpers and ProgressMeter. Nothing here holds the whole
// file: the header prefix is a few MiB at most, and the bulk goes chunk by chunk into the
// engine's `load_push` and into the cache.

export const CACHE_NAME = "coco-models-v1";
// Metadata lives in a second cache under the same key, because Cache API keys ignore the
// URL fragment (a "url#meta" key would collide with the file itself).
export const META_CACHE_NAME = "coco-models-meta-v1";

const FIRST_HEADER_BYTES = 1 << 20; // 1 MiB covers most headers; doubled until parsed
const MAX_HEADER_BYTES = 256 << 20; // a header bigger than this is not a model we can run
const RESUME_TRIES = 3;
const RESUME_BACKOFF_MS = [500, 1500, 3500];
// No byte for this long counts as a dropped connection (a stalled server otherwise keeps
// the page waiting forever); over Range it is resumed like any other drop.
const STALL_MS = 20_000;

/**
 * An error whose message is written for the person in front of the page. `kind` is one of
 * the engine's PageError kinds (www/API.md: "network", "invalid_file", "not_yet", …) or one
 * of the page's own: "cancelled", "integrity" (a sha256 mismatch). `stalled` marks a network
 * error that is a stall (no byte for STALL_MS), which a Range download resumes.
 */
export class LoadError extends Error {
  constructor(message, kind = "network", { stalled = false } = {}) {
    super(message);
    this.name = "LoadError";
    this.kind = kind;
    this.stalled = stalled;
  }
}

/** Turns whatever fetch or a stream threw into a LoadError that says what happened. */
export function explainFetchError(err, url, received = null) {
  if (err instanceof LoadError) return err;
  if (err && err.name === "AbortError") return new LoadError("cancelled", "cancelled");
  const after = received === null ? "" : ` after ${received.toLocaleString("en")} bytes`;
  if (err instanceof TypeError) {
    const crossOrigin = new URL(url, location.href).origin !== location.origin;
    if (crossOrigin && received === null) {
      // fetch() hides the reason from scripts; for a cross-origin URL the usual one is a
      // missing Access-Control-Allow-Origin header, otherwise the host is unreachable.
      return new LoadError(
        `the server did not allow this page to read the file (CORS), or it could not be reached: ${hostOf(url)}`,
      );
    }
    return new LoadError(`the network connection dropped${after} (${err.message})`);
  }
  return new LoadError(`download failed${after}: ${err && err.message ? err.message : String(err)}`);
}

function hostOf(url) {
  try {
    return new URL(url, location.href).host;
  } catch {
    return String(url);
  }
}

function httpError(res, url) {
  const text = res.statusText ? ` ${res.statusText}` : "";
  return new LoadError(`the server answered HTTP ${res.status}${text} for ${hostOf(url)}`);
}

/** Parses "bytes START-END/TOTAL" (TOTAL may be "*"). Returns null when absent or odd. */
export function parseContentRange(value) {
  const m = /^bytes\s+(\d+)-(\d+)\/(\d+|\*)$/i.exec((value || "").trim());
  if (!m) return null;
  return { start: Number(m[1]), end: Number(m[2]), total: m[3] === "*" ? null : Number(m[3]) };
}

/** The validator for If-Range: a strong ETag, else Last-Modified (weak ETags are not allowed there). */
function ifRangeValue(validators) {
  if (validators.etag && !validators.etag.startsWith("W/")) return validators.etag;
  return validators.lastModified || null;
}

function readValidators(res) {
  return { etag: res.headers.get("ETag"), lastModified: res.headers.get("Last-Modified") };
}

function concat(chunks, length) {
  const out = new Uint8Array(length);
  let at = 0;
  for (const c of chunks) {
    out.set(c, at);
    at += c.length;
  }
  return out;
}

/**
 * The size of the file at `url` without downloading it: HEAD, then a one-byte Range.
 * Returns a number, or null when the server doesn't say.
 */
export async function probeSize(url, signal) {
  try {
    const head = await fetch(url, { method: "HEAD", signal });
    const length = Number(head.headers.get("Content-Length"));
    if (head.ok && Number.isFinite(length) && length > 0) return length;
  } catch (err) {
    if (err.name === "AbortError") throw err;
  }
  try {
    const res = await fetch(url, { headers: { Range: "bytes=0-0" }, signal });
    const range = parseContentRange(res.headers.get("Content-Range"));
    // Don't read a 200 body: that would be the whole file.
    if (res.body) res.body.cancel().catch(() => {});
    if (res.status === 206 && range && range.total) return range.total;
  } catch (err) {
    if (err.name === "AbortError") throw err;
  }
  return null;
}

/**
 * Reads a header from a stream that starts at byte 0 (a server without Range support, or
 * the cached copy): chunks are kept until `engine.inspect` stops asking for more, and are
 * handed back so the bulk load continues from the same stream without reading them again.
 */
export async function headerFromStream(reader, engine, context, total) {
  const chunks = [];
  let have = 0;
  // Chunks [0, inspected) were already handed to the engine's header probe, which keeps its
  // parse: each check passes only the pieces read since, so the wasm heap never holds the
  // whole growing prefix.
  let inspected = 0;
  let inspectedBytes = 0;
  let nextCheck = FIRST_HEADER_BYTES;
  for (;;) {
    const { done, value } = await reader.read();
    if (!done) {
      chunks.push(value);
      have += value.length;
      if (have < nextCheck) continue;
    }
    const fresh = chunks.slice(inspected);
    const result = await engine.inspect(concat(fresh, have - inspectedBytes), inspectedBytes, context, done ? have : total ?? undefined);
    inspected = chunks.length;
    inspectedBytes = have;
    if (result.status !== "need_more") return { result, buffered: chunks, have, reader, done };
    if (done) throw new LoadError(`the file ended (${have.toLocaleString("en")} bytes) before its header did`, "invalid_file");
    nextCheck = Math.max(nextCheck * 2, result.need || 0);
    if (nextCheck > MAX_HEADER_BYTES) throw new LoadError(`not yet: the header needs more than ${MAX_HEADER_BYTES >> 20} MiB`, "not_yet");
  }
}

/**
 * Reads the header over the network with Range requests that grow (1 MiB, 2 MiB, …),
 * asking only for the bytes not yet held. Where the server ignores Range (200), the same
 * response is read as a plain stream instead.
 *
 * Returns a plan for `byteSource`: {result, total, validators, rangeSupported, buffered,
 * have, reader?}.
 */
export async function readHeader(url, engine, context, signal) {
  const chunks = [];
  let have = 0;
  let want = FIRST_HEADER_BYTES;
  let total = null;
  let validators = null;
  for (;;) {
    const asked = want - have;
    const headers = { Range: `bytes=${have}-${want - 1}` };
    if (validators && ifRangeValue(validators)) headers["If-Range"] = ifRangeValue(validators);
    let res;
    try {
      res = await fetch(url, { headers, signal, cache: "no-store" });
    } catch (err) {
      throw explainFetchError(err, url);
    }
    if (res.status === 200) {
      if (have > 0) {
        res.body?.cancel().catch(() => {});
        throw new LoadError("the file changed on the server while its header was being read; load again");
      }
      const length = Number(res.headers.get("Content-Length"));
      const plainTotal = Number.isFinite(length) && length > 0 ? length : null;
      if (!res.body) throw new LoadError("the server's answer has no body to read");
      const plan = await headerFromStream(res.body.getReader(), engine, context, plainTotal);
      return { ...plan, total: plainTotal, validators: readValidators(res), rangeSupported: false };
    }
    if (res.status === 416 && have > 0) {
      // Asked past the end: the file is shorter than the header claims.
      throw new LoadError(`the file ended (${have.toLocaleString("en")} bytes) before its header did`, "invalid_file");
    }
    if (res.status !== 206) throw httpError(res, url);
    const range = parseContentRange(res.headers.get("Content-Range"));
    if (range && range.start !== have) {
      throw new LoadError(`the server sent bytes from ${range.start} when asked for ${have}`);
    }
    if (range) total = range.total ?? total;
    if (!validators) validators = readValidators(res);
    let part;
    try {
      part = new Uint8Array(await res.arrayBuffer());
    } catch (err) {
      throw explainFetchError(err, url, have);
    }
    chunks.push(part);
    have += part.length;
    // A short answer means the file ended (when the server doesn't say its total).
    const atEnd = total !== null ? have >= total : part.length < asked;
    // Only the new piece: the engine's probe keeps what it parsed of the earlier ones.
    const result = await engine.inspect(part, have - part.length, context, total ?? (atEnd ? have : undefined));
    if (result.status !== "need_more") {
      // rangeSupported needs Content-Range: without it (a cross-origin server that doesn't
      // expose the header) resumed bytes could not be checked, so no resume.
      return { result, buffered: chunks, have, total, validators, rangeSupported: range !== null };
    }
    if (atEnd) throw new LoadError(`the file ended (${have.toLocaleString("en")} bytes) before its header did`, "invalid_file");
    want = Math.max(want * 2, result.need || 0);
    if (total !== null) want = Math.min(want, total);
    if (want > MAX_HEADER_BYTES) throw new LoadError(`not yet: the header needs more than ${MAX_HEADER_BYTES >> 20} MiB`, "not_yet");
  }
}

/**
 * The whole file as one ordered sequence of chunks: first the bytes the header read kept,
 * then the rest. Over Range it resumes after a dropped connection (RESUME_TRIES times in
 * all per download, with backoff: a link that keeps dropping ends in a clear error rather
 * than a load that never finishes), checking that the server sends the right bytes of the
 * same file.
 *
 * onEvent({resume: n, at: bytes, reason}) reports each resume attempt.
 */
export async function* byteSource(url, plan, signal, onEvent = () => {}) {
  let received = 0;
  for (const chunk of plan.buffered) {
    received += chunk.length;
    yield chunk;
  }
  if (!plan.reader && !plan.rangeSupported) {
    // Range worked but Content-Range wasn't readable (a cross-origin server that doesn't
    // expose it): resumed bytes could not be checked, so read the file plainly from the
    // start and skip what the header read already has.
    let res;
    try {
      res = await fetch(url, { signal, cache: "no-store" });
    } catch (err) {
      throw explainFetchError(err, url, received);
    }
    if (!res.ok || !res.body) throw httpError(res, url);
    plan = { ...plan, reader: skipBytes(res.body.getReader(), received), done: false };
  }
  if (plan.reader) {
    // A plain stream (server without Range, or the cache): continue it; no resume.
    if (plan.done) return;
    try {
      for (;;) {
        const { done, value } = await readOrStall(plan.reader, received);
        if (done) break;
        received += value.length;
        yield value;
      }
    } catch (err) {
      const e = explainFetchError(err, url, received);
      if (e.kind === "network" && !plan.cached) e.message += "; this server does not support resuming (no Range requests)";
      throw e;
    }
    if (plan.total !== null && received !== plan.total) {
      throw new LoadError(`wrong length: got ${received.toLocaleString("en")} bytes, the server announced ${plan.total.toLocaleString("en")}`);
    }
    return;
  }

  // Range: fetch from `received` to the end; on a drop, ask again from where it stopped.
  let tries = 0;
  while (plan.total === null || received < plan.total) {
    let failure;
    try {
      const headers = { Range: `bytes=${received}-` };
      const validator = ifRangeValue(plan.validators);
      if (validator) headers["If-Range"] = validator;
      const res = await fetch(url, { headers, signal, cache: "no-store" });
      if (res.status === 200) {
        res.body?.cancel().catch(() => {});
        throw new LoadError("the file changed on the server during the download (its ETag / Last-Modified no longer match); load again");
      }
      if (res.status === 416 && plan.total === null) return; // nothing left past a header-only file
      if (res.status !== 206) throw httpError(res, url);
      const range = parseContentRange(res.headers.get("Content-Range"));
      if (!range || range.start !== received) {
        res.body?.cancel().catch(() => {});
        throw new LoadError(`the server sent ${range ? `bytes from ${range.start}` : "a range without Content-Range"} when asked for bytes from ${received}`);
      }
      if (plan.total !== null && range.total !== null && range.total !== plan.total) {
        res.body?.cancel().catch(() => {});
        throw new LoadError(`the file's size changed on the server (${plan.total} → ${range.total} bytes); load again`);
      }
      const reader = res.body.getReader();
      for (;;) {
        const { done, value } = await readOrStall(reader, received);
        if (done) break;
        received += value.length;
        if (plan.total !== null && received > plan.total) {
          throw new LoadError(`wrong length: the server sent more than the ${plan.total.toLocaleString("en")} bytes it announced`);
        }
        yield value;
      }
      if (plan.total === null) return;
      if (received < plan.total) failure = new LoadError(`the connection closed after ${received.toLocaleString("en")} of ${plan.total.toLocaleString("en")} bytes`);
    } catch (err) {
      if (err instanceof LoadError && !err.stalled) throw err;
      const e = explainFetchError(err, url, received);
      if (e.kind === "cancelled") throw e;
      failure = e;
    }
    if (!failure) continue;
    if (tries >= RESUME_TRIES) {
      throw new LoadError(`${failure.message}; gave up after ${RESUME_TRIES} attempts to resume`);
    }
    const wait = RESUME_BACKOFF_MS[tries] ?? 4000;
    tries += 1;
    onEvent({ resume: tries, at: received, reason: failure.message });
    await sleep(wait, signal);
  }
}

/** reader.read(), but a read that brings nothing for STALL_MS cancels the stream and throws. */
async function readOrStall(reader, received) {
  let timer;
  const stalled = new Promise((_, reject) => {
    timer = setTimeout(() => {
      reader.cancel?.().catch(() => {});
      reject(new LoadError(`the download stalled: no data for ${STALL_MS / 1000} s after ${received.toLocaleString("en")} bytes`, "network", { stalled: true }));
    }, STALL_MS);
  });
  try {
    return await Promise.race([reader.read(), stalled]);
  } finally {
    clearTimeout(timer);
  }
}

/** A reader that drops the first `count` bytes of another. */
function skipBytes(reader, count) {
  let left = count;
  return {
    cancel: (reason) => reader.cancel(reason),
    async read() {
      for (;;) {
        const r = await reader.read();
        if (r.done || left === 0) return r;
        if (r.value.length <= left) {
          left -= r.value.length;
          continue;
        }
        const rest = r.value.subarray(left);
        left = 0;
        return { done: false, value: rest };
      }
    },
  };
}

function sleep(ms, signal) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(resolve, ms);
    signal?.addEventListener("abort", () => {
      clearTimeout(timer);
      reject(new LoadError("cancelled", "cancelled"));
    }, { once: true });
  });
}

/** Download speed over the last few seconds, and the time left. */
export class ProgressMeter {
  constructor(total) {
    this.total = total;
    this.samples = []; // [time ms, bytes]
    this.start = performance.now();
  }
  update(bytes) {
    const now = performance.now();
    this.samples.push([now, bytes]);
    while (this.samples.length > 2 && now - this.samples[0][0] > 3000) this.samples.shift();
    const [t0, b0] = this.samples[0];
    const rate = now - t0 > 200 ? ((bytes - b0) / (now - t0)) * 1000 : null; // bytes/s
    const eta = rate && this.total ? (this.total - bytes) / rate : null;
    return { bytes, total: this.total, fraction: this.total ? bytes / this.total : null, rate, eta, elapsed: (now - this.start) / 1000 };
  }
}

// ---------------------------------------------------------------------------------------
// Cache API persistence

export function cacheAvailable() {
  // The Cache API exists only in secure contexts (https, localhost).
  return typeof caches !== "undefined";
}

/**
 * Streams a copy of the bytes into the cache while they go to the engine. Nothing is
 * visible in the cache until `commit` (cache.put resolves only after the body closes);
 * `abort` errors the body and deletes whatever may exist, so no partial entry survives.
 */
export class CacheWriter {
  static async open(url, total) {
    if (!cacheAvailable()) return null;
    const cache = await caches.open(CACHE_NAME);
    // A stale copy (a failed earlier load, or a different file) must not answer later.
    await cache.delete(url);
    await (await caches.open(META_CACHE_NAME)).delete(url);
    const writer = new CacheWriter(cache, url);
    const body = new ReadableStream({
      start(controller) {
        writer.controller = controller;
      },
    });
    const headers = { "Content-Type": "application/octet-stream" };
    if (total !== null) headers["X-Coco-Bytes"] = String(total);
    writer.put = cache.put(url, new Response(body, { headers })).then(
      () => true,
      (err) => {
        writer.failed = err;
        return false;
      },
    );
    return writer;
  }

  constructor(cache, url) {
    this.cache = cache;
    this.url = url;
    this.controller = null;
    this.put = null;
    this.failed = null; // set when the browser refused the copy (quota, private mode)
  }

  write(chunk) {
    if (this.failed) return;
    try {
      this.controller.enqueue(chunk);
    } catch (err) {
      this.failed = err;
    }
  }

  /** Closes the copy and waits for the browser to store it. Returns true when stored. */
  async commit() {
    if (!this.failed) {
      try {
        this.controller.close();
      } catch (err) {
        this.failed = err;
      }
    }
    const stored = await this.put;
    if (!stored) await this.cache.delete(this.url);
    return stored;
  }

  async abort(reason) {
    try {
      this.controller.error(reason || new Error("aborted"));
    } catch {
      // already closed or errored
    }
    await this.put;
    await this.cache.delete(this.url);
    await (await caches.open(META_CACHE_NAME)).delete(this.url);
  }
}

/** Records what the loaded bytes hashed to, so a load from the cache can check itself. */
export async function writeCacheMeta(url, meta) {
  const metaCache = await caches.open(META_CACHE_NAME);
  await metaCache.put(url, new Response(JSON.stringify(meta), { headers: { "Content-Type": "application/json" } }));
}

/**
 * The cached copy of `url` with its metadata, or null. An entry without its metadata (or
 * the reverse) is a leftover of an interrupted write and is deleted.
 */
export async function readCached(url) {
  if (!cacheAvailable()) return null;
  const cache = await caches.open(CACHE_NAME);
  const metaCache = await caches.open(META_CACHE_NAME);
  const [response, metaResponse] = await Promise.all([cache.match(url), metaCache.match(url)]);
  let meta = null;
  if (metaResponse) {
    try {
      meta = await metaResponse.json();
    } catch {
      meta = null;
    }
  }
  if (!response || !meta || !meta.sha256) {
    await Promise.all([cache.delete(url), metaCache.delete(url)]);
    return null;
  }
  return { response, meta };
}

/** Every complete entry: [{url, bytes, sha256, date, …}]. */
export async function listCached() {
  if (!cacheAvailable()) return [];
  const metaCache = await caches.open(META_CACHE_NAME);
  const out = [];
  for (const request of await metaCache.keys()) {
    const res = await metaCache.match(request);
    try {
      const meta = await res.json();
      out.push({ ...meta, url: request.url });
    } catch {
      await metaCache.delete(request);
    }
  }
  out.sort((a, b) => String(a.url).localeCompare(String(b.url)));
  return out;
}

export async function deleteCached(url) {
  if (!cacheAvailable()) return;
  await (await caches.open(CACHE_NAME)).delete(url);
  await (await caches.open(META_CACHE_NAME)).delete(url);
}

export async function clearCache() {
  if (!cacheAvailable()) return;
  await caches.delete(CACHE_NAME);
  await caches.delete(META_CACHE_NAME);
}
