/**
 * The jobs of the chaos run and the tables it records them in, shared by the
 * driver (run-chaos.ts) and the worker processes (chaos-worker.ts).
 */
import type { JobSpec } from '../../src/index.js';

export const SCHEMA = 'chaos';
/** A queue with a global concurrency limit, so that it has a row in the queues table to lock. */
export const LIMITED_QUEUE = 'limited';
export const LIMITED_QUEUE_CONCURRENCY = 8;

export interface ChaosPayload {
  n: number;
  /** How long the handler works (unless its signal fires first). */
  ms: number;
}

/**
 * One job of the mix: most take a few ms (throughput, so results are often still
 * buffered when a fault hits); some take up to 300 ms; 1% take 0.5 to 2 visibility
 * timeouts, so that faults find handlers running and long runs need their lock
 * renewed many times. 15% go to the limited queue.
 */
export function chaosJob(n: number, visibilityTimeoutMs: number): JobSpec {
  const r = Math.random();
  const ms =
    r < 0.01 ? visibilityTimeoutMs * (0.5 + 1.5 * Math.random()) : r < 0.05 ? 20 + 280 * Math.random() : 4 * Math.random();
  const payload: ChaosPayload = { n, ms: Math.round(ms) };
  return { task: 'chaos', queue: Math.random() < 0.15 ? LIMITED_QUEUE : 'default', payload, maxAttempts: 100 };
}

/**
 * Why a run's signal fired, from the reason the worker gave (a SluiceError with
 * code LOCK_LOST for both lock cases, told apart by its message).
 */
export function abortCauseOf(reason: unknown): string {
  const message = reason instanceof Error ? reason.message : String(reason);
  if (message.includes('could not be renewed')) return 'unrenewed';
  if (message.includes('taken back')) return 'lock-lost';
  return `other: ${message.slice(0, 200)}`;
}

/**
 * The driver's records, next to Sluice's tables in the run's schema:
 * - runs: one row per handler run (run_id is the worker's name and a counter),
 *   by the server clock: when the handler was invoked, when its work started and
 *   ended (see chaos-worker.ts); aborted is why the handler's signal stopped it
 *   (NULL: it finished its work); worked is false when it was aborted before its
 *   work began.
 * - kills: when each SIGKILLed worker was certainly dead (written after its exit).
 * - faults: every fault's window by the server clock, with the worker it hit or
 *   the job rows it locked (NULL: all of them).
 * - waves: the enqueued waves of jobs, so that a retried enqueue never adds a wave twice.
 */
export function recordTables(s: string): string {
  return `
    CREATE TABLE ${s}.runs (
      run_id text PRIMARY KEY, job_id bigint NOT NULL, attempt int NOT NULL, worker text NOT NULL,
      invoked_at timestamptz NOT NULL, started_at timestamptz NOT NULL DEFAULT clock_timestamp(), ended_at timestamptz,
      aborted text, worked boolean NOT NULL DEFAULT true);
    CREATE INDEX ON ${s}.runs (job_id);
    CREATE TABLE ${s}.kills (worker text PRIMARY KEY, at timestamptz NOT NULL);
    CREATE TABLE ${s}.faults (
      id serial PRIMARY KEY, kind text NOT NULL, worker text, job_ids bigint[],
      started_at timestamptz NOT NULL DEFAULT clock_timestamp(), ended_at timestamptz, note text);
    CREATE TABLE ${s}.waves (n int PRIMARY KEY)`;
}
