import { describe, expect, it } from 'vitest';
import { checkConnections } from '../../src/doctor/checks.js';
import { DEFAULT_THRESHOLDS } from '../../src/doctor/findings.js';

const row = { sluice: 20, listening: 0, max: 30, reserved: 3 };

describe('checkConnections', () => {
  it('counts against what ordinary roles may use, and superusers in their reserved slots apart (outside review 239: 104%)', () => {
    const full = checkConnections({ ...row, used: 28 }, DEFAULT_THRESHOLDS);
    expect(full.status).toBe('critical');
    expect(full.summary).toMatch(/^27 of 27 connections in use \(100%\), and 1 of the 3 kept for superusers, 20 by Sluice/);
    const half = checkConnections({ ...row, used: 13 }, DEFAULT_THRESHOLDS);
    expect(half.summary).toMatch(/^13 of 27 connections in use \(48%\), 20 by Sluice/);
  });
});
