/**
 * What the CLI prints of text it did not write (names, messages, payloads): no
 * byte a terminal acts on, C1 controls included (outside reviews 265 to 267).
 */
import { describe, expect, it } from 'vitest';
import { formatTable, jsonText, printable, terminalText } from '../../src/cli/output.js';

const RAW = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u202a-\u202e\u2066-\u2069]/;

describe('printable and terminalText', () => {
  it('escape C0 and C1 controls, DEL and bidi overrides; plain names stay as they are', () => {
    const hostile = 'q\x1b[2J\u009b31m\u007f\u202eend';
    expect(printable(hostile)).toBe('"q\\u001b[2J\\u009b31m\\u007f\\u202eend"');
    expect(printable('mail')).toBe('mail');
    expect(terminalText(`line one\n${hostile}\tcol`)).toBe('line one\n' + 'q\\u001b[2J\\u009b31m\\u007f\\u202eend' + '\tcol');
    expect(terminalText('a\nb\r', false)).toBe('a\\u000ab\\u000d');
    expect(formatTable(['QUEUE'], [[hostile]])).not.toMatch(RAW);
  });

  it('jsonText writes them as \\u escapes: valid JSON that parses back to the same text (outside review 269)', () => {
    const value = { queue: 'q\x1b[2J\u009b31m\u007f\u202eend', n: [1, 2] };
    const text = jsonText(value);
    expect(text).not.toMatch(RAW);
    expect(JSON.parse(text)).toEqual(value);
    expect(jsonText(undefined)).toBe('null');
  });
});
