// Serves the built pages (../dist) with a recorded snapshot for working on the UI without a
// cluster: `npm run build && node browser/fixture-server.mjs [port] [snapshot.json]`. The
// snapshot's times are shifted to now on every request so the pages do not call it stale.
// Management is reported off. The tests use the real backend (docs/console.md), not this.

import { createServer } from 'node:http';
import { readFileSync, existsSync } from 'node:fs';
import { extname, join, normalize } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = fileURLToPath(new URL('.', import.meta.url));
const dist = join(here, '..', 'dist');
const port = Number(process.argv[2] ?? 4180);
const fixture = JSON.parse(readFileSync(process.argv[3] ?? join(here, 'snapshot.json'), 'utf8'));
const TYPES = { '.html': 'text/html', '.js': 'text/javascript', '.css': 'text/css', '.woff2': 'font/woff2', '.svg': 'image/svg+xml' };

function fresh() {
  const shift = Date.now() - fixture.collected_at_ms;
  const s = structuredClone(fixture);
  s.collected_at_ms += shift;
  for (const h of s.history) h.at_ms += shift;
  return s;
}

createServer((req, res) => {
  const path = new URL(req.url, 'http://x').pathname;
  if (path === '/api/v1/snapshot') {
    res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(fresh()));
    return;
  }
  if (path === '/api/v1/management') {
    const [ns, name] = [fixture.cluster.namespace, fixture.cluster.name];
    res.writeHead(200, { 'content-type': 'application/json' }).end(
      JSON.stringify({ enabled: false, unlocked: false, expires_at_ms: null, csrf_token: null, confirmation: `${ns}/${name}` }),
    );
    return;
  }
  let file = normalize(join(dist, path));
  if (!file.startsWith(dist) || !existsSync(file) || path === '/') file = join(dist, 'index.html');
  res.writeHead(200, { 'content-type': TYPES[extname(file)] ?? 'application/octet-stream' }).end(readFileSync(file));
}).listen(port, '127.0.0.1', () => console.log(`fixture console on http://127.0.0.1:${port}/`));
