// Numbers with their units. `undefined`/`null` is "unavailable", never 0.

export const UNAVAILABLE = '—';

function isNum(v: number | null | undefined): v is number {
  return typeof v === 'number' && Number.isFinite(v);
}

/** 1536 -> "1.5 KiB". */
export function bytes(v: number | null | undefined): string {
  if (!isNum(v)) return UNAVAILABLE;
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let n = v;
  let i = 0;
  while (Math.abs(n) >= 1024 && i < units.length - 1) {
    n /= 1024;
    i += 1;
  }
  return i === 0 ? `${n} B` : `${n.toFixed(n >= 100 ? 0 : 1)} ${units[i]}`;
}

/** 12345 -> "12,345". */
export function count(v: number | null | undefined, locale = 'en'): string {
  if (!isNum(v)) return UNAVAILABLE;
  return Math.round(v).toLocaleString(locale);
}

/** A per-second rate with its unit: "1,234 msg/s". */
export function rate(v: number | null | undefined, unit: string, locale = 'en'): string {
  if (!isNum(v)) return UNAVAILABLE;
  const digits = v < 10 ? 1 : 0;
  return `${v.toLocaleString(locale, { maximumFractionDigits: digits, minimumFractionDigits: digits })} ${unit}`;
}

/** 41.234 -> "41.2 %". */
export function percent(v: number | null | undefined): string {
  if (!isNum(v)) return UNAVAILABLE;
  return `${v.toFixed(1)} %`;
}

/** Seconds to "850 µs", "12.0 ms", "1.50 s". */
export function seconds(v: number | null | undefined): string {
  if (!isNum(v)) return UNAVAILABLE;
  if (v < 0.001) return `${Math.round(v * 1e6)} µs`;
  if (v < 1) return `${(v * 1000).toFixed(1)} ms`;
  return `${v.toFixed(2)} s`;
}

/** How long ago `ms` (epoch ms) was, from `now`: "5 s", "3 min", "2 h". */
export function age(ms: number | null | undefined, now: number): string {
  if (!isNum(ms)) return UNAVAILABLE;
  const s = Math.max(0, Math.round((now - ms) / 1000));
  if (s < 120) return `${s} s`;
  if (s < 7200) return `${Math.round(s / 60)} min`;
  return `${Math.round(s / 3600)} h`;
}

/** The upper bound of the bucket holding quantile `q` of a histogram, in seconds. */
export function quantileBound(
  h: { bounds: number[]; counts: number[] } | null | undefined,
  q: number,
): number | null {
  if (!h) return null;
  const total = h.counts.reduce((a, b) => a + b, 0);
  if (total === 0) return null;
  const rank = Math.max(1, Math.ceil(q * total));
  let seen = 0;
  for (let i = 0; i < h.counts.length; i += 1) {
    seen += h.counts[i];
    if (seen >= rank) return i < h.bounds.length ? h.bounds[i] : null;
  }
  return null;
}
