/**
 * The messages on a schema's channel ('sluice:<schema>'), in one place. Two
 * kinds share it:
 * - wake-up hints, {"q": queue, "t": ms since the epoch}, written only by the
 *   SQL function wake_payload() (migration 0009): the insert trigger,
 *   enqueue_job() and the wake, notify and watchJob statements all call it;
 * - control messages, {"c": ...}, written by encodeControl() below and sent by
 *   the statements of src/db/statements/control.ts, except cancels, which the
 *   cancel statements of admin.ts build per row in SQL (cancelTargets).
 * decodeMessage() reads both.
 */

/** A wake-up hint: a queue got jobs due at `runAt` (ms since epoch). */
export interface WakeHint {
  queue: string;
  runAt: number;
}

/**
 * A control message: `cancel` names a job to abort wherever it runs, and the
 * attempt it cancelled (absent from senders before it was added); `queues`
 * means the queues table changed (pause, limits); `probe` is a worker's check that
 * its LISTEN hears what its pool sends (see ListenProbe), for that worker alone.
 */
export type ControlMessage = { c: 'cancel'; id: string; attempt?: number } | { c: 'queues' } | { c: 'probe'; id: string };

/** The payload of a control message, as the statements that send it take it (a `$n` parameter). */
export function encodeControl(message: ControlMessage): string {
  return JSON.stringify(message.c === 'queues' ? { c: 'queues' } : { c: message.c, id: message.id });
}

/** Wake-up hints (no `c` field) and control messages share the schema's channel. */
export function decodeMessage(payload: string | undefined): WakeHint | ControlMessage {
  try {
    const parsed = JSON.parse(payload ?? '') as { q?: unknown; t?: unknown; c?: unknown; id?: unknown; attempt?: unknown };
    if (parsed.c === 'cancel') {
      const { attempt } = parsed;
      return { c: 'cancel', id: String(parsed.id), ...(Number.isSafeInteger(attempt) && { attempt: attempt as number }) };
    }
    if (parsed.c === 'queues') return { c: 'queues' };
    if (parsed.c === 'probe') return { c: 'probe', id: String(parsed.id) };
    return { queue: String(parsed.q ?? ''), runAt: Number(parsed.t ?? 0) };
  } catch {
    // A hand-written NOTIFY on our channel: treat it as "something may be due".
    return { queue: '', runAt: 0 };
  }
}
