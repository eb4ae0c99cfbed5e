import type { WorkerStore } from '../db/worker-store.js';
import { Snooze } from '../errors.js';
import type { JobRow } from '../job.js';
import { serializePayload } from '../payload.js';
import type { BackoffOptions } from './backoff.js';
import type { Emit, HandBackReason } from './events.js';
import { failureOf, isFailure, localStart, type Completion, type Failure, type Recorded } from './outcome-records.js';
import type { AppliedResults, ResultBatch, ResultSource } from './result-source.js';
import type { Outcome, Run } from './run.js';
import { RefusedResults } from './refused-results.js';
import { refusedRefund, releaseJobs, type Released } from './single-writes.js';
import { Snoozes } from './snoozes.js';

export interface CompleterConfig {
  /** The worker's retry delay policy (a task's own wins). */
  backoff: Required<BackoffOptions>;
  /** How long a hand-back waits for an aborted handler that has not stopped (see record). */
  visibilityTimeoutMs: number;
  /** Largest result stored, in bytes of JSON. */
  maxResultBytes: number;
}

/** What the completer tells the rest of the worker. */
export interface CompleterSignals {
  emit: Emit;
  /** A result is waiting to be written. */
  resultAdded(): void;
  /** A run ended with nothing to write (cancelled, taken away): its slot is free for a claim. */
  slotFreed(): void;
  /** A job this worker returned to pending falls due at `at` (ms since epoch). */
  dueAt(at: number): void;
  /** A result write failed. */
  error(err: unknown): void;
  /** A snooze or hand-back failed for good. */
  writeError(err: unknown, what: 'hand-back' | 'snooze'): void;
}

/**
 * Turns the outcome of each run into what the database must record, and reports
 * it once recorded. Completions and failures wait in a buffer that the fetch loop
 * writes in its next cycle (guarded by lock holder and attempt, so a result written
 * twice, or for a job taken away, changes nothing); the retry policy (attempts left,
 * backoff) is decided here. Snoozes and releases are rare and go out on their own.
 */
export class Completer implements ResultSource {
  private completed: Completion[] = [];
  private failed: Failure[] = [];
  /** Jobs claimed ahead that started since the last cycle, and when (their started_at is written by the next). */
  private started = new Map<string, number>();
  /**
   * Starts taken by a cycle still in flight. A job's result waits for its start's
   * cycle to come back: written by a second cycle in flight at the same time, it
   * would find the row locked by the first, be skipped and wait SKIPPED_RETRY_MS
   * (a 5 ms job's result written ~290 ms late under load, tests/groups.test.ts).
   */
  private readonly startsInFlight = new Set<string>();
  /** Results whose row another session held, or that Postgres refused, until they may go out again. */
  private readonly refusals: RefusedResults;
  /**
   * Batches taken by cycles still out: their jobs are still this worker's. Left out
   * of ids(), a result whose row another session held was forgotten by the
   * heartbeat for as long as each try to write it was out (its row-held listing
   * dropped: a rescue at that moment took the job; CI under load).
   */
  private readonly sending = new Set<ResultBatch>();
  /** Snooze writes and write checks in flight; settled() waits for them. */
  private readonly writes = new Set<Promise<void>>();
  /** Snoozes and hand-backs: their jobs still this worker's until written. */
  private readonly snoozes: Snoozes;

  constructor(
    private readonly store: WorkerStore,
    private readonly config: CompleterConfig,
    private readonly signals: CompleterSignals,
  ) {
    this.snoozes = new Snoozes(store, config.visibilityTimeoutMs, signals);
    this.refusals = new RefusedResults(config.backoff, { back: (results) => this.putBack(results), error: signals.error });
  }

  get size(): number {
    const alone = this.refusals.due;
    if (this.startsInFlight.size === 0) return alone + this.completed.length + this.failed.length + this.started.size;
    return alone + this.takeable(this.completed).length + this.takeable(this.failed).length + this.started.size;
  }

  get unwritten(): number {
    return this.refusals.size + this.completed.length + this.failed.length;
  }

  /** Ids of the jobs whose results (or snoozes) wait here or are being written: their locks must stay fresh until written. */
  ids(): string[] {
    return [
      ...this.sendingIds(),
      ...this.refusals.ids(),
      ...this.completed.map((c) => c.id),
      ...this.failed.map((f) => f.id),
      ...this.snoozes.ids(),
    ];
  }

  /** Jobs left processing for the rescuer, their handlers still running (see Snoozes.leftToRescuer). */
  leftToRescuer(): string[] {
    return this.snoozes.leftToRescuer();
  }

  /** Jobs this worker claimed (see Snoozes.claimed). */
  claimed(ids: readonly string[]): void {
    this.snoozes.claimed(ids);
  }

  /**
   * Of the held `ids`, those whose locks the heartbeat renews: not results or
   * starts being written (the cycle holds their rows: a beat would find them held,
   * as if by another session, and list them so in the registry: outside review
   * 144 saw a job of a worker SIGKILLed just after such a beat rescued as "held by
   * another session", its attempt refunded), nor jobs aborted in an outage while
   * their restart check is out, as it reads their locks' age (renewed now, the
   * restart would no longer show; see Snoozes.afterOutage).
   */
  renewable(ids: string[]): string[] {
    const checking = this.snoozes.checkingRestart;
    if (checking.size === 0 && this.sending.size === 0 && this.startsInFlight.size === 0) return ids;
    const sent = new Set([...this.sendingIds(), ...this.startsInFlight]);
    return ids.filter((id) => !checking.has(id) && !sent.has(id));
  }

  private sendingIds(): string[] {
    return [...this.sending].flatMap((b) => [...b.completed, ...b.failed].map((r) => r.id));
  }

  /** A job claimed ahead started at `at` (ms since epoch): its started_at goes out with the next cycle. */
  markStarted(id: string, at: number): void {
    this.started.set(id, at);
    this.signals.resultAdded();
  }

  /** Records how a run ended. */
  record(run: Run, outcome: Outcome, durationMs: number, progress?: string): void {
    const { job } = run;
    // A job that ended before its start was written needs no start: its outcome says it all.
    this.started.delete(job.id);
    if (outcome.kind === 'completed') {
      let result: string | null;
      try {
        result = outcome.value === undefined ? null : serializePayload(outcome.value, this.config.maxResultBytes, 'result');
      } catch (error) {
        // A result that cannot be stored would be lost: fail the job instead (no
        // retry would change what the handler returns).
        this.fail(run, error, true, durationMs, progress);
        return;
      }
      this.completed.push({
        id: job.id,
        attempt: run.attempt,
        result,
        progress,
        job,
        task: run.task,
        durationMs,
        startedAt: localStart(run),
      });
      this.signals.resultAdded();
    } else if (outcome.kind === 'failed') {
      this.fail(run, outcome.error, outcome.permanent, durationMs, progress);
    } else if (outcome.kind === 'snoozed') {
      this.snooze(job, outcome.snooze);
    } else if (outcome.kind === 'handedBack') {
      // Written as a snooze of 0 (pending now, the attempt not spent), retried while the
      // row stays held; and not before the handler has stopped: one that ignores its
      // signal ran beside the next attempt in another worker (outside review 104). The
      // job stays held, so heartbeated, meanwhile, for up to a visibility timeout. A
      // handler still running then is not handed back at all (review 105: it ran beside
      // the new attempt): as at stop(), the job is left for the rescuer.
      const stopped = run.handlerStopped(this.config.visibilityTimeoutMs);
      this.snooze(job, new Snooze(0), 'row-held', stopped);
    } else if (outcome.kind === 'unrenewed') {
      // Postgres was unreachable for the lock's renewal timeout: a failure, unless
      // it restarted meanwhile (outside review 110: an outage made a job of one
      // attempt a dead letter), or the beats went out unanswered and the job is
      // still this worker's (review 145: a table lock). Asked once the database answers.
      const stopped = run.handlerStopped(this.config.visibilityTimeoutMs);
      const charge = (refundedBefore: boolean) =>
        this.fail(run, refundedBefore ? refusedRefund(outcome.error) : outcome.error, false, durationMs, progress);
      this.track(this.snoozes.afterOutage(job, stopped, charge, outcome.unanswered));
    } else if (outcome.kind === 'cancelled') {
      this.signals.emit('job:cancel', job);
      // Nothing to write, so no cycle claims for the freed slot: the poll did, up to
      // pollIntervalMs later, with due jobs waiting (outside review 207).
      this.signals.slotFreed();
    } else if (outcome.kind === 'lost') {
      this.signals.slotFreed();
    }
    // 'released' jobs are handed back by the worker's stop; 'lost' ones are someone else's now.
  }

  take(): ResultBatch {
    const batch = this.nextBatch();
    this.sending.add(batch);
    return batch;
  }

  private nextBatch(): ResultBatch {
    const alone = this.refusals.takeAlone();
    if (alone.length > 0) {
      return {
        completed: alone.filter((r): r is Completion => !isFailure(r)),
        failed: alone.filter(isFailure),
        started: [],
        startedAt: [],
        alone: true,
      };
    }
    const batch = {
      completed: this.takeable(this.completed),
      failed: this.takeable(this.failed),
      started: [...this.started.keys()],
      startedAt: [...this.started.values()],
    };
    this.completed = this.completed.filter((c) => !batch.completed.includes(c));
    this.failed = this.failed.filter((f) => !batch.failed.includes(f));
    this.started = new Map();
    for (const id of batch.started) this.startsInFlight.add(id);
    return batch;
  }

  /** Results not waiting for a start in flight. */
  private takeable<R extends Recorded>(list: R[]): R[] {
    return this.startsInFlight.size === 0 ? list : list.filter((r) => !this.startsInFlight.has(r.id));
  }

  /** The cycle that took `batch` is back: results held for its starts may go out. */
  private landed(batch: ResultBatch): void {
    if (batch.started.length === 0) return;
    for (const id of batch.started) this.startsInFlight.delete(id);
    if (this.completed.length + this.failed.length > 0) this.signals.resultAdded();
  }

  restore(batch: ResultBatch): void {
    this.sending.delete(batch);
    this.landed(batch);
    for (const result of [...batch.completed, ...batch.failed] as Recorded[]) result.unsure = true;
    this.completed = (batch.completed as Completion[]).concat(this.completed);
    this.failed = (batch.failed as Failure[]).concat(this.failed);
    // Not the start of a job that has ended since: its outcome says it all, and one
    // statement must not update the same row twice (only one update would count).
    const ended = new Set([...this.completed, ...this.failed].map((r) => r.id));
    batch.started.forEach((id, i) => {
      if (!ended.has(id)) this.started.set(id, batch.startedAt[i]!);
    });
  }

  rejected(batch: ResultBatch, err: unknown): boolean {
    this.sending.delete(batch);
    const results = [...batch.completed, ...batch.failed] as Recorded[];
    if (!batch.alone) {
      // Which one Postgres refused is not known: each goes alone, the others written as usual.
      this.restore({ completed: [], failed: [], started: batch.started, startedAt: batch.startedAt });
      this.refusals.suspect(results);
      return true;
    }
    this.landed(batch);
    batch.started.forEach((id, i) => this.started.set(id, batch.startedAt[i]!));
    // Each of these was refused on its own (a suspect alone, or held ones tried again together).
    return this.refusals.refused(results, err);
  }

  applied(batch: ResultBatch, written: AppliedResults, othersBack?: Promise<void>): void {
    this.sending.delete(batch);
    this.landed(batch);
    const { completed, failed, skipped } = written;
    for (const result of [...batch.completed, ...batch.failed] as Recorded[]) {
      if (skipped.has(result.id)) this.refusals.skipped(result, othersBack);
    }
    // Not written: no longer this worker's. Read why (rare: a rescue, a cancel, or a
    // statement whose reply was lost after it committed some of them).
    const unwritten = { completed: [] as Completion[], failed: [] as Failure[] };
    for (const c of batch.completed as Completion[]) {
      if (skipped.has(c.id)) continue;
      if (completed.has(c.id)) this.completedEvent(c);
      else unwritten.completed.push(c);
    }
    for (const f of batch.failed as Failure[]) {
      if (skipped.has(f.id)) continue;
      if (failed.has(f.id)) this.failedEvent(f);
      else unwritten.failed.push(f);
    }
    if (unwritten.completed.length + unwritten.failed.length > 0) this.confirm(unwritten.completed, unwritten.failed);
  }

  private completedEvent(c: Completion): void {
    this.signals.emit('job:complete', c.job, {
      result: c.result == null ? null : (JSON.parse(c.result) as unknown),
      durationMs: c.durationMs,
    });
  }

  private failedEvent(f: Failure): void {
    const willRetry = !f.final;
    this.signals.emit('job:fail', f.job, { error: f.error, willRetry, durationMs: f.durationMs });
    if (willRetry) {
      // Other workers find the retry by polling; this one knows when it falls due.
      const runAt = Date.now() + f.delayMs;
      this.signals.dueAt(runAt);
      this.signals.emit('job:retry', f.job, { error: f.error, runAt: new Date(runAt), nextAttempt: f.attempt + 1 });
    }
  }

  /**
   * Outcomes found no longer this worker's. One sent before in a statement that
   * failed may have been committed by it, its reply lost: finished by this worker at
   * that attempt, the outcome's events fire. A job cancelled while it ran, its
   * cancel's NOTIFY missed (listen: false, LISTEN down) and its result written before
   * the next heartbeat, is told as cancelled (outside review 240: job:lock-lost).
   * Otherwise the lock was lost. Rare, so a statement of its own rather than a
   * column of every cycle.
   */
  private confirm(completed: readonly Completion[], failed: readonly Failure[]): void {
    const check = this.store.writtenByMe([...completed, ...failed].map((r) => r.id)).then(
      (rows) => {
        const wrote = (r: Recorded, status: string) =>
          r.unsure === true && rows.get(r.id)?.status === status && rows.get(r.id)?.attempts === r.attempt;
        const lost = (r: Recorded) =>
          this.signals.emit(rows.get(r.id)?.status === 'cancelled' ? 'job:cancel' : 'job:lock-lost', r.job);
        for (const c of completed) {
          if (wrote(c, 'completed')) this.completedEvent(c);
          else lost(c);
        }
        for (const f of failed) {
          if (wrote(f, f.final ? 'failed' : 'pending')) this.failedEvent(f);
          else lost(f);
        }
      },
      (err: unknown) => {
        this.signals.error(err);
        for (const r of [...completed, ...failed]) this.signals.emit('job:lock-lost', r.job);
      },
    );
    this.writes.add(check);
    void check.finally(() => this.writes.delete(check));
  }

  /**
   * Back to pending now without spending the attempt the claim took: this worker,
   * not the job, gave up (stop, or a job claimed ahead that waited too long).
   * Rows another session holds are tried again until `deadline`. Returns the jobs
   * not released (still this worker's: the rescuer returns them later). Throws when
   * the database cannot be reached.
   */
  release(jobs: readonly JobRow[], deadline = Date.now()): Promise<Released> {
    return releaseJobs(this.store, jobs, deadline);
  }

  /**
   * At stop: resolves once the snoozes in flight are written, failed or given up
   * (a row another session still holds: ids() keeps the job), and results held
   * for locked rows are back in the buffer.
   */
  async settled(): Promise<void> {
    this.snoozes.stop();
    while (this.writes.size > 0) await Promise.all(this.writes);
    this.refusals.releaseAll();
  }

  /** Results back from RefusedResults, to go out with the next cycle. */
  private putBack(results: Recorded[]): void {
    for (const result of results) {
      if (isFailure(result)) this.failed.push(result);
      else this.completed.push(result);
    }
    this.signals.resultAdded();
  }

  private fail(run: Run, error: unknown, permanent: boolean, durationMs: number, progress?: string): void {
    this.failed.push(failureOf(run, error, { permanent, durationMs, progress }, this.config.backoff));
    this.signals.resultAdded();
  }

  /** Back to pending at the snooze time, the attempt not spent. Not batched: snoozes are rare. */
  private snooze(job: JobRow, snooze: Snooze, handBack?: HandBackReason, after?: Promise<boolean>): void {
    this.track(this.snoozes.write(job, snooze, handBack, after));
  }

  /** A write settled() waits for. */
  private track(write: Promise<void>): void {
    this.writes.add(write);
    void write.finally(() => this.writes.delete(write));
  }
}
