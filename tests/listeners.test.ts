import { afterEach, describe, expect, it } from 'vitest';
import { ListenerError, Worker, type JobRow, type SluiceError, type WorkerOptions } from '../src/index.js';
import { RelayEvents } from '../src/outbox/relay-events.js';
import { waitFor } from './helpers/database.js';
import { useWorkers } from './helpers/workers.js';
import { TEST_DRIVER } from './helpers/driver.js';

// Outside review 155: a listener that threw stranded its claim's jobs in 'processing'
// (never run, their locks renewed for as long as the worker lived), and the other
// jobs' events of a batch were never delivered.

const fx = useWorkers('listeners');
/** Workers made here, unstarted (listeners go on first, some with no 'error' listener): stopped after each test. */
const workers: Worker[] = [];
afterEach(() => Promise.all(workers.splice(0).map((w) => w.stop())));

function worker(queueName: string, options: Partial<WorkerOptions> = {}): { worker: Worker; handled: number[] } {
  const handled: number[] = [];
  const w = new Worker({
    connectionString: fx.db.url,
    schema: fx.db.schema,
    driver: TEST_DRIVER,
    queues: [queueName],
    concurrency: 2,
    tasks: { t: ({ i }: { i: number }) => void handled.push(i) },
    ...options,
  });
  workers.push(w);
  return { worker: w, handled };
}

async function enqueueThree(queueName: string): Promise<string[]> {
  return fx.queue.enqueueMany([0, 1, 2].map((i) => ({ task: 't', payload: { i }, queue: queueName })));
}

async function statuses(ids: string[]): Promise<string[]> {
  const { rows } = await fx.db.pool.query<{ status: string }>(
    `SELECT status FROM ${fx.db.s}.jobs WHERE id = ANY($1::bigint[]) ORDER BY id`,
    [ids],
  );
  return rows.map((r) => r.status);
}

async function allCompleted(ids: string[]): Promise<void> {
  await waitFor(async () => (await statuses(ids)).every((s) => s === 'completed'), 'every job completed');
}

describe('listeners that throw', () => {
  it("a 'job:start' listener that throws once: every job still runs, and the error event names the listener", async () => {
    const { worker: w, handled } = worker('start');
    const errors: SluiceError[] = [];
    w.on('error', (err) => errors.push(err));
    let calls = 0;
    w.on('job:start', () => {
      if (++calls === 1) throw new Error('listener bug');
    });
    await w.start();
    const ids = await enqueueThree('start');
    await allCompleted(ids);
    expect(handled.sort()).toEqual([0, 1, 2]);
    expect(calls).toBe(3);
    const listenerErrors = errors.filter((e) => e instanceof ListenerError);
    expect(listenerErrors).toHaveLength(1);
    expect(listenerErrors[0]).toMatchObject({ code: 'LISTENER', event: 'job:start' });
    expect(listenerErrors[0]!.message).toMatch(/'job:start' listener threw: listener bug/);
    expect((listenerErrors[0]!.cause as Error).message).toBe('listener bug');
  });

  it('a thrown value that cannot be made text (a null-prototype object, a revoked Proxy) is reported all the same', async () => {
    // Outside review 157: building the ListenerError threw again, into the worker.
    const { proxy, revoke } = Proxy.revocable({}, {});
    revoke();
    const unprintable = [Object.create(null) as unknown, proxy];
    const { worker: w, handled } = worker('hostile', {
      tasks: {
        t: async ({ i }: { i: number }, ctx) => {
          await ctx.progress({ i });
          handled.push(i);
        },
      },
    });
    const errors: SluiceError[] = [];
    w.on('error', (err) => errors.push(err));
    let n = 0;
    w.on('job:start', () => {
      throw unprintable[n++ % 2];
    });
    w.on('job:progress', () => Promise.reject(unprintable[n++ % 2]));
    w.on('jobs:claimed', () => {
      throw unprintable[n++ % 2];
    });
    await w.start();
    const ids = await enqueueThree('hostile');
    await allCompleted(ids);
    expect(handled.sort()).toEqual([0, 1, 2]);
    await waitFor(() => errors.filter((e) => e instanceof ListenerError).length >= 7, 'the listener errors');
    expect(errors.every((e) => e instanceof ListenerError && /listener threw: a value that cannot be read/.test(e.message))).toBe(
      true,
    );
  });

  it("a 'jobs:claimed' listener that throws strands nothing", async () => {
    const { worker: w, handled } = worker('claimed');
    w.on('error', () => {});
    w.on('jobs:claimed', () => {
      throw new Error('claimed listener bug');
    });
    await w.start();
    const ids = await enqueueThree('claimed');
    await allCompleted(ids);
    expect(handled.sort()).toEqual([0, 1, 2]);
  });

  it("every 'job:complete' of a batch reaches every listener though one throws each time", async () => {
    const { worker: w } = worker('complete', { concurrency: 3 });
    w.on('error', () => {});
    const first: string[] = [];
    const second: string[] = [];
    w.on('job:complete', (job: JobRow) => {
      first.push(job.id);
      throw new Error('complete listener bug');
    });
    w.on('job:complete', (job: JobRow) => void second.push(job.id));
    const ids = await enqueueThree('complete');
    await w.start();
    await allCompleted(ids);
    await waitFor(() => second.length === 3, 'three job:complete events');
    expect(first.sort()).toEqual([...ids].sort());
    expect(second.sort()).toEqual([...ids].sort());
  });

  it('a listener whose promise rejects is an error event, not an unhandled rejection', async () => {
    const { worker: w } = worker('async');
    const errors: SluiceError[] = [];
    w.on('error', (err) => errors.push(err));
    w.on('job:start', () => Promise.reject(new Error('async listener bug')));
    await w.start();
    const ids = await enqueueThree('async');
    await allCompleted(ids);
    await waitFor(() => errors.filter((e) => e instanceof ListenerError).length === 3, 'three listener errors');
    expect(errors.every((e) => e.message.includes('async listener bug'))).toBe(true);
  });

  it("an 'error' listener that throws, or none at all, makes a process warning; the jobs still run", async () => {
    const warnings: string[] = [];
    const onWarning = (w: Error & { code?: string }) => {
      if (w.code === 'SLUICE_LISTENER') warnings.push(w.message);
    };
    process.on('warning', onWarning);
    try {
      const { worker: w, handled } = worker('warn');
      w.on('error', () => {
        throw new Error('error listener bug');
      });
      w.on('job:start', () => {
        throw new Error('start listener bug');
      });
      await w.start();
      const ids = await enqueueThree('warn');
      await allCompleted(ids);
      expect(handled.sort()).toEqual([0, 1, 2]);
      await waitFor(() => warnings.length >= 3, 'three warnings');
      expect(warnings.every((m) => /'error' listener threw: error listener bug/.test(m))).toBe(true);

      // No 'error' listener at all: the listener's exception is the warning.
      const bare = worker('bare');
      bare.worker.on('job:start', () => {
        throw new Error('bare listener bug');
      });
      await bare.worker.start();
      const more = await enqueueThree('bare');
      await allCompleted(more);
      await waitFor(() => warnings.some((m) => /'job:start' listener threw: bare listener bug/.test(m)), 'the warning');
    } finally {
      process.off('warning', onWarning);
    }
  });
});

describe("the outbox relay's events", () => {
  it('a listener that throws is reported as an error event, and the others are called', () => {
    const events = new RelayEvents();
    const errors: Error[] = [];
    events.on('error', (err) => errors.push(err));
    let after = 0;
    events.on('caughtUp', () => {
      throw new Error('relay listener bug');
    });
    events.on('caughtUp', () => void after++);
    expect(() => events.emit('caughtUp', { destination: 'd', partition: 0, behindHorizon: false })).not.toThrow();
    expect(after).toBe(1);
    expect(errors).toHaveLength(1);
    expect(errors[0]).toBeInstanceOf(ListenerError);
    expect(errors[0]!.message).toMatch(/'caughtUp' listener threw: relay listener bug/);
  });

  it("with no 'error' listener, a throwing listener is a process warning and the relay's own errors are dropped quietly", async () => {
    // Outside review 159: a no-op 'error' listener of the relay's own swallowed the listener's error.
    const events = new RelayEvents();
    const warnings: string[] = [];
    const onWarning = (w: Error & { code?: string }) => {
      if (w.code === 'SLUICE_LISTENER') warnings.push(w.message);
    };
    process.on('warning', onWarning);
    try {
      events.on('caughtUp', () => {
        throw new Error('unheard relay listener bug');
      });
      events.emit('caughtUp', { destination: 'd', partition: 0, behindHorizon: false });
      expect(() => events.reportError(new Error('statement failed'))).not.toThrow();
      await waitFor(() => warnings.length > 0, 'the warning');
      expect(warnings).toEqual([expect.stringMatching(/'caughtUp' listener threw: unheard relay listener bug/)]);
    } finally {
      process.off('warning', onWarning);
    }
  });
});
