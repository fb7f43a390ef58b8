"""Static files for the page on the device (aiohttp: Range, HEAD and ETag, which the page's
probe and resumable download use). `python3 serve.py [--coi] PORT DIST [/models=DIR ...]`;
--coi adds COOP/COEP (cross-origin isolation: SharedArrayBuffer, which wllama's threads need)."""
import mimetypes, os, sys

from aiohttp import web

mimetypes.add_type("application/wasm", ".wasm")  # for WebAssembly.instantiateStreaming
mimetypes.add_type("text/javascript", ".js")

args = sys.argv[1:]
coi = args[0] == "--coi"
if coi:
    args = args[1:]
port, dist, mounts = int(args[0]), args[1], args[2:]


@web.middleware
async def isolate(request, handler):
    response = await handler(request)
    response.headers["Cross-Origin-Opener-Policy"] = "same-origin"
    response.headers["Cross-Origin-Embedder-Policy"] = "require-corp"
    return response


app = web.Application(middlewares=[isolate] if coi else [])
app.router.add_get("/", lambda _: web.FileResponse(os.path.join(dist, "index.html")))
for m in mounts:
    prefix, path = m.split("=", 1)
    app.router.add_static(prefix, path)
app.router.add_static("/", dist)
web.run_app(app, host="127.0.0.1", port=port, print=None)
