/**
 * An in-memory WorkerStore with the semantics of the real statements
 * (src/db/statements/worker.ts, claim_limited() of migration 0010): guarded
 * writes, claims in priority, run_at, id order, started_at for the jobs that start
 * at once, and rows that another session holds locked skipped, never waited for.
 * So the runtime's decisions can be tested without Postgres and with a fake clock
 * (vi.useFakeTimers: Date.now() is the database's clock here). Several stores
 * over one MemoryDatabase are several workers. What touches real Postgres is
 * still proven against a real server in tests/*.test.ts.
 */
import { MAX_ERROR_HISTORY } from '../../src/db/statements/job-columns.js';
import type {
  CycleRequest,
  CycleResult,
  HeartbeatAnswer,
  LockedWrite,
  QueueStateRow,
  RestartVerdict,
  WorkerStore,
} from '../../src/db/worker-store.js';
import type { JobError, JobRow, JobStatus } from '../../src/job.js';

export interface MemoryJob extends JobRow {
  result?: unknown;
  progress?: unknown;
  errors: JobError[];
}

type Operation = keyof WorkerStore;
type Gate = 'before' | 'reply';

/** The shared "database" of several in-memory workers. */
export class MemoryDatabase {
  readonly jobs = new Map<string, MemoryJob>();
  readonly queues = new Map<string, QueueStateRow>();
  /** Every statement sent, by operation and worker, in order. */
  readonly log: { op: Operation; worker: string }[] = [];
  /** Rows that some other session (an admin's open transaction, say) holds locked: 'job:<id>' or 'queue:<name>'. */
  private readonly locks = new Set<string>();
  private readonly cut = new Set<string>();
  private nextId = 1;
  /** pg_postmaster_start_time(): set by restarted(). */
  serverStartedAt = new Date(0);
  private readonly failures: { op: Operation; error: Error }[] = [];
  private readonly lostReplies: Operation[] = [];
  private readonly gates: { op: Operation; when: Gate; open: Promise<void> }[] = [];
  private readonly stranded: { op: Operation; deliver: Promise<void> }[] = [];

  /** As if Postgres restarted now (what handBackAfterRestart compares locks with). */
  restarted(): void {
    this.serverStartedAt = new Date();
  }

  /** Adds a pending job; returns its id. */
  add(
    task: string,
    options: Partial<Pick<JobRow, 'queue' | 'priority' | 'max_attempts' | 'payload'>> & { delayMs?: number } = {},
  ): string {
    const id = String(this.nextId++);
    const now = new Date();
    this.jobs.set(id, {
      id,
      queue: options.queue ?? 'default',
      task,
      payload: options.payload ?? {},
      status: 'pending',
      priority: options.priority ?? 0,
      run_at: new Date(now.getTime() + (options.delayMs ?? 0)),
      attempts: 0,
      max_attempts: options.max_attempts ?? 25,
      locked_at: null,
      locked_by: null,
      last_error: null,
      created_at: now,
      updated_at: now,
      finished_at: null,
      started_at: null,
      trace_context: null,
      job_key: null,
      group_key: null,
      errors: [],
    });
    return id;
  }

  addMany(n: number, task: string, options: Parameters<MemoryDatabase['add']>[1] = {}): string[] {
    return Array.from({ length: n }, () => this.add(task, options));
  }

  job(id: string): MemoryJob {
    const job = this.jobs.get(id);
    if (!job) throw new Error(`no job ${id}`);
    return job;
  }

  count(status: JobStatus): number {
    let n = 0;
    for (const job of this.jobs.values()) if (job.status === status) n++;
    return n;
  }

  /** Sets a queue's row (what pause/resume and setQueueConcurrency write). */
  setQueue(name: string, state: { paused?: boolean; limit?: number | null }): void {
    const row = this.queues.get(name) ?? { name, paused: false, concurrency_limit: null, grouped: false, strict: false };
    const concurrencyLimit = state.limit === undefined ? row.concurrency_limit : state.limit;
    this.queues.set(name, {
      name,
      paused: state.paused ?? row.paused,
      concurrency_limit: concurrencyLimit,
      grouped: row.grouped,
      strict: concurrencyLimit !== null,
      no_ahead: concurrencyLimit !== null,
    });
  }

  /** Another session locks the job's row (SELECT ... FOR UPDATE in an open transaction); call the result to commit. */
  lockJob(id: string): () => void {
    return this.lock(`job:${id}`);
  }

  /** Another session locks the queue's row; call the result to commit. */
  lockQueue(name: string): () => void {
    return this.lock(`queue:${name}`);
  }

  /** Every statement of `worker` fails (a network partition) until the returned function is called. */
  partition(worker: string): () => void {
    this.cut.add(worker);
    return () => void this.cut.delete(worker);
  }

  /** The next call of `op` (by any worker) rejects with `error`, before it changes anything. */
  failNext(op: Operation, error: Error = new Error(`${op} failed`)): void {
    this.failures.push({ op, error });
  }

  /** The next call of `op` (by any worker) does its work, then rejects as if its reply was lost with the connection. */
  loseNextReply(op: Operation): void {
    this.lostReplies.push(op);
  }

  /**
   * The next call of `op` waits until the returned function is called (a statement
   * in flight): 'before' it runs (default), or after it ran, with its 'reply' on the way.
   */
  holdNext(op: Operation, when: Gate = 'before'): () => void {
    let open!: () => void;
    this.gates.push({ op, when, open: new Promise<void>((resolve) => (open = resolve)) });
    return open;
  }

  /**
   * The next call of `op` fails at once for no answer (its statement stalled in the
   * network), and runs only when the returned function is called: the network
   * carried it after all, and Postgres committed it, with no one to tell.
   */
  strandNext(op: Operation): () => void {
    let deliver!: () => void;
    this.stranded.push({ op, deliver: new Promise<void>((resolve) => (deliver = resolve)) });
    return deliver;
  }

  /** Called by MemoryStore first: when this call of `op` is stranded, the promise of its late delivery. */
  takeStranded(op: Operation): Promise<void> | undefined {
    const i = this.stranded.findIndex((s) => s.op === op);
    return i >= 0 ? this.stranded.splice(i, 1)[0]!.deliver : undefined;
  }

  /** A store for one worker. */
  store(workerId: string): MemoryStore {
    return new MemoryStore(this, workerId);
  }

  /** Called by MemoryStore before each operation. */
  async enter(op: Operation, worker: string): Promise<void> {
    this.log.push({ op, worker });
    await this.pass(op, 'before');
    if (this.cut.has(worker)) throw Object.assign(new Error(`${op}: connection timed out`), { code: 'ETIMEDOUT' });
    const failure = this.failures.findIndex((f) => f.op === op);
    if (failure >= 0) throw this.failures.splice(failure, 1)[0]!.error;
  }

  /** Called by MemoryStore around each operation: waits at a gate set by holdNext(). */
  async pass(op: Operation, when: Gate): Promise<void> {
    const gate = this.gates.findIndex((g) => g.op === op && g.when === when);
    if (gate >= 0) await this.gates.splice(gate, 1)[0]!.open;
    const lost = when === 'reply' ? this.lostReplies.indexOf(op) : -1;
    if (lost >= 0) {
      this.lostReplies.splice(lost, 1);
      throw Object.assign(new Error('Connection terminated unexpectedly'), { code: 'ECONNRESET' });
    }
  }

  /** True when another session holds the job's row. */
  isLocked(id: string): boolean {
    return this.locks.has(`job:${id}`);
  }

  isQueueLocked(name: string): boolean {
    return this.locks.has(`queue:${name}`);
  }

  /**
   * The rescuer: expired locks back to pending, or failed when out of attempts. A
   * job whose handler never started (claimed ahead) gets its attempt back and is
   * always pending again. Rows another session holds are skipped.
   */
  rescue(visibilityTimeoutMs: number): string[] {
    const now = new Date();
    const rescued: string[] = [];
    for (const job of this.jobs.values()) {
      if (job.status !== 'processing' || job.locked_at!.getTime() >= now.getTime() - visibilityTimeoutMs) continue;
      if (this.isLocked(job.id)) continue;
      const started = job.started_at !== null;
      const failed = started && job.attempts >= job.max_attempts;
      const message =
        `lock expired: worker ${job.locked_by ?? '?'} stopped heartbeating` +
        (started
          ? ''
          : " before the job's start was recorded (attempt not counted; a job claimed ahead may have started, its start not yet written)");
      Object.assign(job, {
        status: failed ? 'failed' : 'pending',
        attempts: started ? job.attempts : job.attempts - 1,
        finished_at: failed ? now : null,
        last_error: message,
        errors: [...recent(job.errors), { attempt: job.attempts, at: now.toISOString(), message }],
        locked_at: null,
        locked_by: null,
        run_at: started ? now : job.run_at, // never started: keeps its place in claim order
        updated_at: now,
        started_at: null,
      });
      rescued.push(job.id);
    }
    return rescued;
  }

  private lock(key: string): () => void {
    if (this.locks.has(key)) throw new Error(`${key} is locked already`);
    this.locks.add(key);
    return () => void this.locks.delete(key);
  }
}

/** The error history without its oldest entry once full (keepRecent in job-columns.ts). */
function recent(errors: JobError[]): JobError[] {
  return errors.length >= MAX_ERROR_HISTORY ? errors.slice(1) : errors;
}

/** A claimed row as the claim returns it: the job columns, not the detail ones (jobColumns()). */
function claimedRow(job: MemoryJob): JobRow {
  const { result: _r, progress: _p, errors: _e, ...row } = job;
  return { ...row };
}

/** Held by this worker (and on that attempt, when given): the guard of every write. */
function mine(job: MemoryJob | undefined, worker: string, attempt?: number): job is MemoryJob {
  return !!job && job.status === 'processing' && job.locked_by === worker && (attempt === undefined || job.attempts === attempt);
}

export class MemoryStore implements WorkerStore {
  constructor(
    readonly db: MemoryDatabase,
    readonly workerId: string,
  ) {}

  async cycle(r: CycleRequest): Promise<CycleResult> {
    const late = this.db.takeStranded('cycle');
    if (late) {
      void late.then(() => this.cycle(r)).catch(() => {});
      throw Object.assign(new Error('cycle: no answer from Postgres'), { code: 'ETIMEDOUT' });
    }
    await this.db.enter('cycle', this.workerId);
    const now = new Date();
    // Every part of the statement sees one snapshot: a job failed here with no
    // delay is not claimed again by the same statement. So pick the claim first.
    const candidates = this.due(r.queues, r.tasks, r.limit);
    const writable = (id: string) => this.db.jobs.has(id) && !this.db.isLocked(id);
    const completed = new Set<string>();
    const failed = new Set<string>();
    const skipped = new Set<string>();
    for (const c of r.completed) {
      const job = this.db.jobs.get(c.id);
      if (!writable(c.id)) {
        if (job) skipped.add(c.id);
        continue;
      }
      if (!mine(job, this.workerId, c.attempt)) continue;
      Object.assign(job, {
        status: 'completed',
        locked_at: null,
        finished_at: now,
        updated_at: now,
        result: c.result === null ? null : JSON.parse(c.result),
      });
      completed.add(c.id);
    }
    for (const f of r.failed) {
      const job = this.db.jobs.get(f.id);
      if (!writable(f.id)) {
        if (job) skipped.add(f.id);
        continue;
      }
      if (!mine(job, this.workerId, f.attempt)) continue;
      Object.assign(job, {
        status: f.final ? 'failed' : 'pending',
        last_error: f.errorText,
        locked_at: null,
        updated_at: now,
        run_at: f.final ? job.run_at : new Date(now.getTime() + f.delayMs),
        finished_at: f.final ? now : null,
        started_at: f.final ? job.started_at : null,
        errors: [
          ...recent(job.errors),
          {
            attempt: f.attempt,
            at: now.toISOString(),
            message: f.errorText.split('\n')[0]!,
            stack: f.errorText,
          },
        ],
      });
      failed.add(f.id);
    }
    r.started.forEach((id, i) => {
      const job = this.db.jobs.get(id);
      const at = r.startedAt?.[i];
      if (writable(id) && mine(job, this.workerId) && job.started_at === null)
        job.started_at = at === undefined ? now : new Date(at);
    });
    // As in the SQL, paused and limited queues are left out after the LIMIT (the
    // guard against a stale cache sits on the outer UPDATE): a worker that still
    // asks for such a queue gets a short claim, and those rows stay pending.
    const blocked = new Set(
      [...this.db.queues.values()].filter((q) => q.paused || q.concurrency_limit !== null).map((q) => q.name),
    );
    const claimed = candidates
      .map((job, i) => ({ job, startsNow: i < r.startNow }))
      .filter(({ job }) => !blocked.has(job.queue))
      .map(({ job, startsNow }) => this.take(job, now, startsNow));
    await this.db.pass('cycle', 'reply');
    return { completed, failed, skipped, claimed };
  }

  /** Test shorthand: a cycle that only claims, up to `limit` jobs, every one starting at once. */
  async claim(limit: number, tasks: readonly string[] = ['t'], queues: readonly string[] = ['default']): Promise<JobRow[]> {
    return (await this.cycle({ completed: [], failed: [], started: [], queues, tasks, limit, startNow: limit })).claimed;
  }

  /** Test shorthand: a cycle that only writes. */
  async write(batch: Partial<Pick<CycleRequest, 'completed' | 'failed' | 'started'>>): Promise<CycleResult> {
    return this.cycle({ completed: [], failed: [], started: [], ...batch, queues: [], tasks: [], limit: 0, startNow: 0 });
  }

  async claimLimited(queue: string, tasks: readonly string[], max: number, _startNow?: number, finished: readonly string[] = []) {
    await this.db.enter('claimLimited', this.workerId);
    const claimed = this.limited(queue, tasks, max, finished);
    await this.db.pass('claimLimited', 'reply');
    // Groups and rate limits are claim_queue()'s (migration 0016), tested against Postgres.
    return { jobs: claimed, retryAt: null };
  }

  async hasDueJobs(queues: readonly string[], tasks: readonly string[]) {
    await this.db.enter('hasDueJobs', this.workerId);
    const due = this.due(queues, tasks, 1, false).length > 0;
    await this.db.pass('hasDueJobs', 'reply');
    return due;
  }

  async heartbeat(ids: readonly string[]) {
    await this.db.enter('heartbeat', this.workerId);
    const result: HeartbeatAnswer = { done: new Set(), skipped: new Set(), cancelled: new Set() };
    for (const id of ids) {
      const job = this.db.jobs.get(id);
      if (job?.status === 'cancelled') result.cancelled.add(id);
      if (!mine(job, this.workerId)) continue;
      if (this.db.isLocked(id)) {
        result.skipped.add(id);
        continue;
      }
      job.locked_at = new Date();
      result.done.add(id);
    }
    await this.db.pass('heartbeat', 'reply');
    return result;
  }

  async release(ids: readonly string[]) {
    await this.db.enter('release', this.workerId);
    const result = this.releaseRows(ids);
    await this.db.pass('release', 'reply');
    return result;
  }

  async releaseOrphans(held: readonly string[]) {
    await this.db.enter('releaseOrphans', this.workerId);
    const keep = new Set(held);
    const orphans = [...this.db.jobs.values()].filter((j) => mine(j, this.workerId) && !keep.has(j.id));
    const { done } = this.releaseRows(orphans.map((j) => j.id));
    await this.db.pass('releaseOrphans', 'reply');
    return [...done];
  }

  async writtenByMe(ids: readonly string[]) {
    await this.db.enter('writtenByMe', this.workerId);
    const rows = new Map<string, { status: string; attempts: number }>();
    for (const id of ids) {
      const job = this.db.jobs.get(id);
      if (job?.locked_by === this.workerId) rows.set(id, { status: job.status, attempts: job.attempts });
    }
    await this.db.pass('writtenByMe', 'reply');
    return rows;
  }

  /** Back to pending, attempt not spent: rows another session holds are skipped. */
  private releaseRows(ids: readonly string[]): LockedWrite {
    const result: LockedWrite = { done: new Set(), skipped: new Set() };
    const now = new Date();
    for (const id of ids) {
      const job = this.db.jobs.get(id);
      if (!mine(job, this.workerId)) continue;
      if (this.db.isLocked(id)) {
        result.skipped.add(id);
        continue;
      }
      Object.assign(job, {
        status: 'pending',
        attempts: job.attempts - 1,
        locked_at: null,
        locked_by: null,
        run_at: now,
        updated_at: now,
        started_at: null,
      });
      result.done.add(id);
    }
    return result;
  }

  async snooze(id: string, attempt: number, runAt: Date | null, delayMs: number, note?: string) {
    await this.db.enter('snooze', this.workerId);
    const job = this.db.jobs.get(id);
    let at: Date | 'skipped' | undefined;
    if (mine(job, this.workerId, attempt)) {
      if (this.db.isLocked(id)) {
        at = 'skipped';
      } else {
        at = runAt ?? new Date(Date.now() + delayMs);
        Object.assign(job, {
          status: 'pending',
          attempts: job.attempts - 1,
          locked_at: null,
          locked_by: null,
          run_at: at,
          updated_at: new Date(),
          started_at: null,
        });
        if (note !== undefined) {
          job.last_error = note;
          job.errors.push({ attempt: attempt, at: new Date().toISOString(), message: note, refunded: true });
        }
      }
    }
    await this.db.pass('snooze', 'reply');
    return at;
  }

  async handBackAfterRestart(id: string, attempt: number, message: string, unansweredMessage: string | null = null) {
    await this.db.enter('handBackAfterRestart', this.workerId);
    const job = this.db.jobs.get(id);
    let verdict: RestartVerdict;
    if (mine(job, this.workerId, attempt)) {
      const restarted = job.locked_at! < this.db.serverStartedAt;
      const refund = restarted || unansweredMessage !== null;
      if (this.db.isLocked(id)) verdict = 'skipped';
      else if (!refund) verdict = 'charge';
      else if (job.errors.at(-1)?.refunded === true) verdict = restarted ? 'refunded-before' : 'charge';
      else {
        verdict = { runAt: job.run_at, restarted };
        if (!restarted) message = unansweredMessage!;
        const at = new Date();
        job.errors.push({ attempt: job.attempts, at: at.toISOString(), message, refunded: true });
        Object.assign(job, {
          status: 'pending',
          attempts: job.attempts - 1,
          locked_at: null,
          locked_by: null,
          updated_at: at,
          started_at: null,
          last_error: message,
        });
      }
    }
    await this.db.pass('handBackAfterRestart', 'reply');
    return verdict;
  }

  async progress(ids: readonly string[], values: readonly string[]) {
    await this.db.enter('progress', this.workerId);
    const written = new Set<string>();
    ids.forEach((id, i) => {
      const job = this.db.jobs.get(id);
      if (mine(job, this.workerId) && !this.db.isLocked(id)) {
        job.progress = JSON.parse(values[i]!);
        written.add(id);
      }
    });
    await this.db.pass('progress', 'reply');
    return written;
  }

  async queueState(queues: readonly string[]) {
    await this.db.enter('queueState', this.workerId);
    const rows = [...this.db.queues.values()].filter(
      (q) => queues.includes(q.name) && (q.paused || q.concurrency_limit !== null || q.grouped),
    );
    await this.db.pass('queueState', 'reply');
    return rows.map((q) => ({ ...q }));
  }

  async markGrouped(queue: string) {
    await this.db.enter('markGrouped', this.workerId);
    const row = this.db.queues.get(queue) ?? {
      name: queue,
      paused: false,
      concurrency_limit: null,
      grouped: false,
      strict: false,
    };
    const flagged = !row.grouped;
    this.db.queues.set(queue, { ...row, grouped: true });
    await this.db.pass('markGrouped', 'reply');
    return flagged;
  }

  /** Due pending jobs of `queues` in claim order, up to `limit`, skipping rows another session holds. */
  private due(queues: readonly string[], tasks: readonly string[], limit: number, skipLocked = true): MemoryJob[] {
    if (limit <= 0 || queues.length === 0) return [];
    const now = Date.now();
    return [...this.db.jobs.values()]
      .filter(
        (j) =>
          j.status === 'pending' &&
          queues.includes(j.queue) &&
          tasks.includes(j.task) &&
          j.run_at.getTime() <= now &&
          !(skipLocked && this.db.isLocked(j.id)),
      )
      .sort((a, b) => b.priority - a.priority || a.run_at.getTime() - b.run_at.getTime() || Number(a.id) - Number(b.id))
      .slice(0, limit);
  }

  private take(job: MemoryJob, now: Date, startsNow: boolean): JobRow {
    Object.assign(job, {
      status: 'processing',
      attempts: job.attempts + 1,
      locked_at: now,
      locked_by: this.workerId,
      updated_at: now,
      started_at: startsNow ? now : null,
    });
    return claimedRow(job);
  }

  /** claim_limited() of migration 0010. */
  private limited(queue: string, tasks: readonly string[], max: number, finished: readonly string[]): JobRow[] {
    const row = this.db.queues.get(queue);
    if (row && this.db.isQueueLocked(queue)) return []; // someone holds the row: try again on a later cycle
    if (row?.paused) return [];
    let n = max;
    const limit = row?.concurrency_limit ?? null;
    if (limit !== null) {
      let running = 0;
      // As claim_limited() (0022): jobs this worker finished, results not written yet, are not running.
      const done = (job: MemoryJob) => finished.includes(job.id) && job.locked_by === this.workerId;
      for (const job of this.db.jobs.values()) if (job.queue === queue && job.status === 'processing' && !done(job)) running++;
      n = Math.min(max, limit - running);
    }
    if (n <= 0) return [];
    const claim: MemoryJob[] = [];
    for (const job of this.due([queue], tasks, n, false)) {
      if (!this.db.isLocked(job.id)) claim.push(job);
      else if (limit !== null) break; // a serial queue keeps its order: never jump a locked row
    }
    const now = new Date();
    return claim.map((job) => this.take(job, now, true));
  }
}
