"""Static files for the page on the device (aiohttp: Range, HEAD and ETag, which the page's
probe and resumable download use). `python3 serve.py PORT DIST [/models=DIR ...]`."""
import mimetypes, os, sys

from aiohttp import web

mimetypes.add_type("application/wasm", ".wasm")  # for WebAssembly.instantiateStreaming
mimetypes.add_type("text/javascript", ".js")

port, dist, mounts = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
app = web.Application()
app.router.add_get("/", lambda _: web.FileResponse(os.path.join(dist, "index.html")))
for m in mounts:
    prefix, path = m.split("=", 1)
    app.router.add_static(prefix, path)
app.router.add_static("/", dist)
web.run_app(app, host="127.0.0.1", port=port, print=None)
