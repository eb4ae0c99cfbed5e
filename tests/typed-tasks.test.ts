import pg from 'pg';
import { afterAll, beforeAll, describe, expect, expectTypeOf, it } from 'vitest';
import { z } from 'zod';
import { ConfigError, DuplicateJobError, Queue, ValidationError, Worker, type JobRow, type TaskInputsOf } from '../src/index.js';
import { createTestSchema, waitFor, type TestDatabase } from './helpers/database.js';
import { TEST_DRIVER } from './helpers/driver.js';

interface Tasks {
  send_welcome: { userId: number };
  nightly_report: { day: string; full?: boolean };
}

const schemas = {
  send_welcome: z.object({ userId: z.number().int(), lang: z.string().default('en') }),
  remind: z.object({ at: z.coerce.date() }),
};

let db: TestDatabase;
let queue: Queue<TaskInputsOf<typeof schemas>>;

beforeAll(async () => {
  db = await createTestSchema('typed');
  queue = new Queue({ pool: db.pool, schema: db.schema, schemas });
});
afterAll(async () => {
  await queue.close();
  await db.drop();
});

async function jobsOf(queueName: string): Promise<JobRow[]> {
  const { rows } = await db.pool.query(
    `SELECT id::text AS id, status, payload, attempts, last_error FROM ${db.s}.jobs WHERE queue = $1 ORDER BY id`,
    [queueName],
  );
  return rows;
}

/**
 * Compile-time checks: `npm run typecheck` fails if a line marked @ts-expect-error
 * compiles, or if a line without it does not. Never called at run time.
 */
export function typeChecks(typed: Queue<Tasks>, untyped: Queue) {
  void typed.enqueue('send_welcome', { userId: 1 });
  void typed.enqueue('nightly_report', { day: '2026-11-30' }, { queue: 'reports' });
  // @ts-expect-error a task name that is not in the map
  void typed.enqueue('send_welcom', { userId: 1 });
  // @ts-expect-error a payload of the wrong type
  void typed.enqueue('send_welcome', { userId: '1' });
  // @ts-expect-error the payload is required when its type does not allow undefined
  void typed.enqueue('send_welcome');
  void typed.enqueueMany([
    { task: 'send_welcome', payload: { userId: 1 } },
    { task: 'nightly_report', payload: { day: 'x', full: true } },
  ]);
  // @ts-expect-error the payload of another task
  void typed.enqueueMany([{ task: 'nightly_report', payload: { userId: 1 } }]);
  // A variable holding one of several task names: checked against their union, a payload of either passed (outside review 207).
  const either = Math.random() > 0.5 ? ('send_welcome' as const) : ('nightly_report' as const);
  // @ts-expect-error a union of task names: narrow it first
  void typed.enqueue(either, { day: 'x' });
  if (either === 'send_welcome') void typed.enqueue(either, { userId: 1 });
  void untyped.enqueue(either, { anything: true });
  void typed.enqueueAfterCommit(async (jobs) => {
    // @ts-expect-error after-commit jobs are checked the same way
    await jobs.enqueue(either, { day: 'x' });
  });
  // @ts-expect-error the payload is required in a batch too (outside review 202: it compiled, and stored {})
  void typed.enqueueMany([{ task: 'send_welcome' }]);
  void untyped.enqueueMany([{ task: 'anything' }]);
  void typed.enqueueAfterCommit(async (jobs) => {
    await jobs.enqueue('send_welcome', { userId: 2 });
    // @ts-expect-error after-commit jobs are checked the same way
    await jobs.enqueue('send_welcome', { user: 2 });
  });

  new Worker<Tasks>({
    connectionString: 'postgres://',
    tasks: {
      send_welcome: async (payload, { job }) => {
        expectTypeOf(payload).toEqualTypeOf<{ userId: number }>();
        expectTypeOf(job.payload).toEqualTypeOf<{ userId: number }>();
      },
      nightly_report: { handler: async ({ day }) => expectTypeOf(day).toEqualTypeOf<string>(), timeoutMs: 1000 },
    },
  });
  // @ts-expect-error a handler for a task that is not in the map
  new Worker<Tasks>({ connectionString: 'postgres://', tasks: { send_welcom: async () => {} } });
  // @ts-expect-error a handler that expects another payload type
  new Worker<Tasks>({ connectionString: 'postgres://', tasks: { send_welcome: async (_p: { userId: string }) => {} } });

  // Inferred from schemas: the handler receives the schema's output.
  new Worker({
    connectionString: 'postgres://',
    schemas,
    tasks: { remind: async ({ at }) => expectTypeOf(at).toEqualTypeOf<Date>() },
  });
  const inferred = new Queue({ schemas });
  // @ts-expect-error inferred from the schemas, too
  void inferred.enqueue('send_welcome', { userId: 'one' });

  // Without a map, anything goes, as before.
  void untyped.enqueue('anything', { at: 'all' });
  void untyped.enqueue('no_payload');
  new Worker({ connectionString: 'postgres://', tasks: { anything: async (p) => expectTypeOf(p).toBeAny() } });
}

describe('typed tasks with Standard Schema validation', () => {
  it('enqueue validates the payload, stores it as given (the worker parses it), and rejects a bad one with nothing inserted', async () => {
    const id = await queue.enqueue('send_welcome', { userId: 7 }, { queue: 'typed-enqueue' });
    expect((await queue.getJob(id))!.payload).toEqual({ userId: 7 });
    await expect(queue.enqueue('send_welcome', { userId: 'x' } as never, { queue: 'typed-enqueue' })).rejects.toThrow(
      ValidationError,
    );
    await expect(queue.enqueue('send_welcome', { userId: 1.5 }, { queue: 'typed-enqueue' })).rejects.toThrow(
      /payload of task "send_welcome" is invalid: userId: /,
    );
    await expect(
      queue.enqueueMany([
        { task: 'send_welcome', payload: { userId: 1 }, queue: 'typed-enqueue' },
        { task: 'send_welcome', payload: {} as never, queue: 'typed-enqueue' },
      ]),
    ).rejects.toThrow(/enqueueMany: job 1: payload of task "send_welcome" is invalid/);
    expect((await jobsOf('typed-enqueue')).map((j) => j.id)).toEqual([id]);
  });

  it('the worker hands handlers the schema output, and fails a payload that does not fit without retrying', async () => {
    // Written by plain SQL, past the Queue's validation, as another service might.
    const good = await db.pool.query(
      `SELECT ${db.s}.enqueue_job('typed-worker', '{"at":"2026-11-30T12:00:00Z"}', _task => 'remind') AS id`,
    );
    const bad = await db.pool.query(`SELECT ${db.s}.enqueue_job('typed-worker', '{"at":"not a date"}', _task => 'remind') AS id`);
    const seen: unknown[] = [];
    const worker = new Worker({
      connectionString: db.url,
      schema: db.schema,
      driver: TEST_DRIVER,
      queues: ['typed-worker'],
      schemas,
      tasks: { remind: async ({ at }) => void seen.push(at) },
    });
    worker.on('error', () => {});
    await worker.start();
    try {
      await waitFor(
        async () => (await jobsOf('typed-worker')).every((j) => j.status === 'completed' || j.status === 'failed'),
        'both jobs to finish',
      );
    } finally {
      await worker.stop();
    }
    const jobs = await jobsOf('typed-worker');
    expect(jobs.find((j) => j.id === String(good.rows[0].id))!.status).toBe('completed');
    expect(jobs.find((j) => j.id === String(bad.rows[0].id))).toMatchObject({ status: 'failed', attempts: 1 });
    expect(jobs.find((j) => j.id === String(bad.rows[0].id))!.last_error).toMatch(/payload of task "remind" is invalid: at:/);
    expect(seen).toEqual([new Date('2026-11-30T12:00:00Z')]);
  });

  it('runs jobs of a schema whose output is not valid input, one map for both sides (outside review 179)', async () => {
    // Stored as the schema's output ({ n: 7 }) and parsed again by the worker, every such job failed.
    const transforming = { tr: z.object({ n: z.string().transform(Number), lang: z.string().default('en') }) };
    const producer = new Queue({ pool: db.pool, schema: db.schema, schemas: transforming });
    const seen: unknown[] = [];
    const onJob: unknown[] = [];
    const worker = new Worker({
      connectionString: db.url,
      schema: db.schema,
      driver: TEST_DRIVER,
      queues: ['typed-transform'],
      schemas: transforming,
      tasks: {
        tr: async (payload, ctx) => {
          seen.push(payload);
          onJob.push(ctx.job.payload);
          void ctx.signal; // still readable on the context handed on
        },
      },
    });
    worker.on('error', () => {});
    await worker.start();
    try {
      const [one] = await producer.enqueueMany([{ task: 'tr', payload: { n: '7' }, queue: 'typed-transform' }]);
      const two = await producer.enqueue('tr', { n: '8' }, { queue: 'typed-transform' });
      await waitFor(
        async () => (await jobsOf('typed-transform')).every((j) => j.status === 'completed'),
        'both jobs to complete',
      );
      expect((await jobsOf('typed-transform')).map((j) => [j.id, j.payload])).toEqual([
        [one, { n: '7' }],
        [two, { n: '8' }],
      ]);
      expect(seen).toEqual([
        { n: 7, lang: 'en' },
        { n: 8, lang: 'en' },
      ]);
      // ctx.job.payload is typed as the parsed payload, and holds it.
      expect(onJob).toEqual(seen);
    } finally {
      await worker.stop();
    }
  });

  it('checks the payload as the worker will read it, its JSON, so a schema only the value before JSON fits is refused (outside review 221)', async () => {
    const strict = new Queue({
      pool: db.pool,
      schema: db.schema,
      schemas: {
        dated: z.object({ at: z.date() }),
        empty: z.undefined(),
        coerced: z.object({ at: z.coerce.date() }),
        thrower: {
          '~standard': {
            version: 1,
            vendor: 'test',
            validate: () => {
              throw new Error('schema exploded');
            },
          },
        } as never,
      },
    });
    const q = { queue: 'typed-as-stored' };
    // Fit as given: a Date, a payload left out. Stored as a string and {}: every job failed for good.
    const asStored = /\(the payload fits the schema as given, not as stored: the worker checks its JSON/;
    await expect(strict.enqueue('dated', { at: new Date() }, q)).rejects.toThrow(asStored);
    await expect(strict.enqueue('empty', undefined, q)).rejects.toThrow(asStored);
    await expect(strict.enqueueMany([{ task: 'dated', payload: { at: new Date() }, ...q }])).rejects.toThrow(
      /^enqueueMany: job 0: payload of task "dated" is invalid: at: .*not as stored/,
    );
    await expect(strict.enqueueAfterCommit(async (jobs) => jobs.enqueue('empty', undefined, q))).rejects.toThrow(asStored);
    // A payload that fits neither way is told as before, without the note.
    const plain = await strict.enqueue('dated', { at: 5 } as never, q).catch((err: Error) => err);
    expect(plain).toBeInstanceOf(ValidationError);
    expect((plain as Error).message).not.toMatch(/as stored/);
    // A schema that throws is a ValidationError too, nothing inserted.
    const threw = await strict.enqueue('thrower', {}, q).catch((err: unknown) => err);
    expect(threw).toBeInstanceOf(ValidationError);
    expect((threw as Error).message).toBe('payload of task "thrower" could not be checked: its schema threw: schema exploded');
    // What takes the JSON form is taken.
    const id = await strict.enqueue('coerced', { at: new Date('2026-12-06T00:00:00Z') }, q);
    expect((await jobsOf('typed-as-stored')).map((j) => j.id)).toEqual([id]);
  });

  it('stores the payload as it was when enqueue was called, the one it checked, whatever the caller changes meanwhile (outside review 223)', async () => {
    const q = { queue: 'typed-snapshot' };
    const p = { userId: 1 };
    const one = queue.enqueue('send_welcome', p, q);
    p.userId = 'not a number' as never;
    const many = queue.enqueueMany([{ task: 'send_welcome', payload: p, ...q }]);
    p.userId = 3;
    await expect(many).rejects.toThrow(/^enqueueMany: job 0: payload of task "send_welcome" is invalid: userId:/);
    const ids = [await one];
    // Promise.all over one reused object: each job as it was at its call.
    const reused = { userId: 0 };
    ids.push(
      ...(await Promise.all(
        [4, 5].map((n) => {
          reused.userId = n;
          return queue.enqueue('send_welcome', reused, q);
        }),
      )),
    );
    const { jobIds } = await queue.enqueueAfterCommit(async (jobs) => {
      for (const n of [6, 7]) {
        reused.userId = n;
        await jobs.enqueue('send_welcome', reused, q);
      }
    });
    ids.push(...jobIds);
    const stored = await jobsOf('typed-snapshot');
    expect(ids.map((id) => stored.find((j) => j.id === id)!.payload)).toEqual([1, 4, 5, 6, 7].map((userId) => ({ userId })));
  });

  it('takes each call as it was: its tx, its runAt, its options read once, its job collected before a slow schema settles (outside review 225)', async () => {
    const slow = new Queue({
      pool: db.pool,
      schema: db.schema,
      schemas: {
        n: z.object({ n: z.number() }).refine(async () => {
          await new Promise((resolve) => setTimeout(resolve, 30));
          return true;
        }),
      },
    });
    const q = { queue: 'typed-at-call' };
    // The tx in effect at the call, whatever the options object says after it.
    const client = await db.pool.connect();
    try {
      await client.query('BEGIN');
      const o: { tx?: pg.PoolClient; queue: string } = { tx: client, ...q };
      const inTx = slow.enqueue('n', { n: 1 }, o);
      delete o.tx;
      await inTx;
      // A getter is read once (outside review 226: its second read picked the Queue's own pool).
      let txReads = 0;
      const getter = {
        ...q,
        get tx() {
          return txReads++ === 0 ? client : undefined;
        },
      };
      await slow.enqueue('n', { n: 1 }, getter as never);
      expect(txReads).toBe(1);
      await client.query('ROLLBACK');
    } finally {
      client.release();
    }
    // A jobs.enqueue() not awaited is inserted; a runAt Date changed after the call is not.
    const when = new Date('2030-01-01T00:00:00Z');
    const { jobIds } = await slow.enqueueAfterCommit(async (jobs) => {
      void jobs.enqueue('n', { n: 2 }, q);
      await jobs.enqueue('n', { n: 3 }, { ...q, runAt: when });
      when.setTime(Date.parse('2099-12-31T00:00:00Z'));
      void jobs.enqueue('n', { n: 4 }, q);
    });
    expect(jobIds).toHaveLength(3);
    // A batch job's delayMs getter is read once (a second read slipped past the check).
    let reads = 0;
    const sneaky = {
      task: 'n',
      payload: { n: 5 },
      ...q,
      get delayMs() {
        return reads++ === 0 ? -5_000_000 : undefined;
      },
    };
    await expect(slow.enqueueMany([sneaky as never])).rejects.toThrow(/delayMs must be a finite number >= 0/);
    const stored = await jobsOf('typed-at-call');
    expect(stored.map((j) => (j.payload as { n: number }).n).sort()).toEqual([2, 3, 4]);
    const third = stored.find((j) => (j.payload as { n: number }).n === 3)!;
    expect((await slow.getJob(third.id))!.run_at.toISOString()).toBe('2030-01-01T00:00:00.000Z');
    // A payload fixed after the call is not told it failed for its JSON form.
    const p = { n: 'x' as unknown };
    const fixed = slow.enqueue('n', p as never, q);
    p.n = 1;
    const error = await fixed.catch((err: Error) => err);
    expect(error).toBeInstanceOf(ValidationError);
    expect((error as Error).message).not.toMatch(/not as stored/);
  });

  it("refuses at start a schedule whose payload its task's schema refuses (outside review 221: a dead letter every tick)", async () => {
    const schemas = { rep: z.object({ kind: z.enum(['daily']) }) };
    const tasks = { rep: async () => {} };
    const schedule = { name: 'typed-report', cron: '0 3 * * *', task: 'rep' };
    const bad = new Worker({
      connectionString: db.url,
      schema: db.schema,
      schemas,
      tasks,
      schedules: [{ ...schedule, payload: { kind: 'weekly' } }],
    });
    await expect(bad.start()).rejects.toThrow(/^schedule "typed-report": payload of task "rep" is invalid: kind: /);
    const good = new Worker({
      connectionString: db.url,
      schema: db.schema,
      schemas,
      tasks,
      queues: ['typed-none'],
      schedules: [{ ...schedule, payload: { kind: 'daily' } }],
    });
    await good.start();
    await good.stop();
  });

  it('rejects schemas that are not Standard Schemas', () => {
    expect(() => new Queue({ schemas: { a: {} as never } })).toThrow(ConfigError);
    expect(
      () =>
        new Worker({ connectionString: db.url, schemas: { t: { validate: () => true } as never }, tasks: { t: async () => {} } }),
    ).toThrow(/schemas.t is not a Standard Schema/);
  });
});

describe('enqueueAfterCommit', () => {
  it('enqueues the collected jobs after the work resolved, and none when it threw or a job was invalid', async () => {
    const client = await db.pool.connect();
    try {
      const { result, jobIds } = await queue.enqueueAfterCommit(async (jobs) => {
        await client.query('BEGIN');
        await jobs.enqueue('send_welcome', { userId: 1 }, { queue: 'after-commit' });
        await jobs.enqueue('send_welcome', { userId: 2 }, { queue: 'after-commit' });
        // Collected only: nothing is in the table while the transaction is open.
        expect(await jobsOf('after-commit')).toEqual([]);
        await client.query('COMMIT');
        return 'done';
      });
      expect(result).toBe('done');
      expect((await jobsOf('after-commit')).map((j) => [j.id, j.payload])).toEqual([
        [jobIds[0], { userId: 1 }],
        [jobIds[1], { userId: 2 }],
      ]);

      await expect(
        queue.enqueueAfterCommit(async (jobs) => {
          await jobs.enqueue('send_welcome', { userId: 3 }, { queue: 'after-commit' });
          throw new Error('rolled back');
        }),
      ).rejects.toThrow('rolled back');
      await expect(
        queue.enqueueAfterCommit(async (jobs) => {
          await jobs.enqueue('send_welcome', { userId: 4 }, { queue: 'after-commit' });
          await jobs.enqueue('send_welcome', { userId: 'five' } as never, { queue: 'after-commit' });
        }),
      ).rejects.toThrow(ValidationError);
      expect(await jobsOf('after-commit')).toHaveLength(2);

      // A call after work settled (not awaited inside it) throws rather than being lost.
      let late: Parameters<Parameters<typeof queue.enqueueAfterCommit>[0]>[0] | undefined;
      await queue.enqueueAfterCommit(async (jobs) => {
        late = jobs;
      });
      await expect(late!.enqueue('send_welcome', { userId: 6 }, { queue: 'after-commit' })).rejects.toThrow(
        /called after work\(\) settled/,
      );
      expect(await jobsOf('after-commit')).toHaveLength(2);
    } finally {
      client.release();
    }
  });

  it('refuses a key twice inside work(), and says a failure after it resolved came after the commit (outside review 177)', async () => {
    // Inside work(): the caller can still roll back. After its commit every job of the batch was lost, as a ValidationError.
    let refusedInside: unknown;
    await queue.enqueueAfterCommit(async (jobs) => {
      await jobs.enqueue('send_welcome', { userId: 7 }, { queue: 'after-commit-keys', jobKey: 'u7' });
      refusedInside = await jobs
        .enqueue('send_welcome', { userId: 7 }, { queue: 'after-commit-keys', jobKey: 'u7' })
        .catch((err: unknown) => err);
    });
    expect(refusedInside).toBeInstanceOf(ValidationError);
    expect((refusedInside as Error).message).toMatch(/jobKey "u7" is already among this call's jobs/);
    expect(await jobsOf('after-commit-keys')).toHaveLength(1);
    // A key held already, in 'error' mode: known only at the insert, after the commit, and said so.
    const late = await queue
      .enqueueAfterCommit(async (jobs) => {
        await jobs.enqueue('send_welcome', { userId: 8 }, { queue: 'after-commit-keys' });
        await jobs.enqueue('send_welcome', { userId: 7 }, { queue: 'after-commit-keys', jobKey: 'u7', jobKeyMode: 'error' });
      })
      .catch((err: unknown) => err);
    expect(late).toBeInstanceOf(DuplicateJobError);
    expect((late as Error).message).toMatch(
      /^enqueueAfterCommit: work\(\) resolved \(taken to mean your transaction committed\), then enqueueing its 2 job\(s\) failed: /,
    );
    expect(await jobsOf('after-commit-keys')).toHaveLength(1);
  });
});
