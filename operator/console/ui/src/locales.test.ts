import { readFileSync, readdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import en from './locales/en.json';
import zh from './locales/zh.json';
import { translate } from './i18n';

const SRC = dirname(fileURLToPath(import.meta.url));

function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory()
      ? sources(join(dir, e.name))
      : /\.tsx?$/.test(e.name) && !e.name.endsWith('.test.ts')
        ? [join(dir, e.name)]
        : [],
  );
}

describe('message catalogs', () => {
  it('have the same keys in English and Chinese', () => {
    const a = Object.keys(en).sort();
    const b = Object.keys(zh).sort();
    expect(a.filter((k) => !b.includes(k))).toEqual([]);
    expect(b.filter((k) => !a.includes(k))).toEqual([]);
  });

  it('keep the same placeholders in both languages', () => {
    const holes = (s: string) => (s.match(/\{\w+\}/g) ?? []).sort().join();
    for (const k of Object.keys(en) as (keyof typeof en)[]) {
      expect(holes(zh[k]), k).toBe(holes(en[k]));
    }
  });

  it('hold every literal key the pages use', () => {
    const used = new Set<string>();
    for (const f of sources(SRC)) {
      for (const m of readFileSync(f, 'utf8').matchAll(/\bt\('([a-zA-Z.]+)'/g)) used.add(m[1]);
    }
    expect(used.size).toBeGreaterThan(50);
    expect([...used].filter((k) => !(k in en))).toEqual([]);
  });

  it('fill placeholders', () => {
    expect(translate('en', 'overview.title', { name: 'ns/q' })).toBe('Cluster ns/q');
    expect(translate('zh', 'overview.title', { name: 'ns/q' })).toBe('集群 ns/q');
  });
});
