import { describe, expect, it } from 'vitest';
import { age, bytes, count, percent, quantileBound, rate, seconds, UNAVAILABLE } from './format';

describe('format', () => {
  it('shows a missing number as unavailable, never as zero', () => {
    for (const f of [bytes, count, percent, seconds]) {
      expect(f(undefined)).toBe(UNAVAILABLE);
      expect(f(null)).toBe(UNAVAILABLE);
    }
    expect(rate(undefined, 'msg/s')).toBe(UNAVAILABLE);
    expect(bytes(0)).toBe('0 B');
  });

  it('gives every number its unit', () => {
    expect(bytes(1536)).toBe('1.5 KiB');
    expect(bytes(5 * 1024 ** 3)).toBe('5.0 GiB');
    expect(rate(1234.4, 'msg/s')).toBe('1,234 msg/s');
    expect(rate(2.5, 'msg/s')).toBe('2.5 msg/s');
    expect(percent(41.234)).toBe('41.2 %');
    expect(seconds(0.00025)).toBe('250 µs');
    expect(seconds(0.012)).toBe('12.0 ms');
    expect(seconds(1.5)).toBe('1.50 s');
    expect(count(12345)).toBe('12,345');
    expect(age(1_000, 6_000)).toBe('5 s');
  });

  it('finds the bucket bound of a quantile', () => {
    const h = { bounds: [0.001, 0.01, 0.1], counts: [50, 40, 9, 1] };
    expect(quantileBound(h, 0.5)).toBe(0.001);
    expect(quantileBound(h, 0.99)).toBe(0.1);
    expect(quantileBound(h, 1)).toBeNull();
    expect(quantileBound({ bounds: [], counts: [] }, 0.5)).toBeNull();
  });
});
