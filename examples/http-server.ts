/**
 * An HTTP server (Fastify) whose signup route enqueues the welcome job in the
 * request's own transaction: a request that fails after the INSERT (the email is
 * taken) rolls back its job with its data. The worker runs in the same process
 * here; in production it usually runs in its own (`sluice worker`).
 *
 *   npm install fastify
 *   DATABASE_URL=postgres://… npx tsx examples/http-server.ts
 *
 * Works in a schema of its own (SLUICE_SCHEMA, default example_http_server),
 * recreated on each run. Sends itself two signups for the same email, then exits:
 * 0 when the first was welcomed and the second left nothing behind.
 */
import Fastify from 'fastify';
import pg from 'pg';
import { migrate, Queue, Worker } from 'sluice';

const connectionString = process.env.DATABASE_URL;
const schema = process.env.SLUICE_SCHEMA ?? 'example_http_server';
const pool = new pg.Pool({ connectionString, options: `-c search_path=${schema}` });
pool.on('error', (err) => console.error(`pg: ${err.message}`)); // see examples/quick-start.ts
pool.on('connect', (client) => client.on('error', (err) => console.error(`pg: ${err.message}`)));
await pool.query(`DROP SCHEMA IF EXISTS ${pg.escapeIdentifier(schema)} CASCADE`);
await migrate({ connectionString, schema });
await pool.query('CREATE TABLE users (id serial PRIMARY KEY, email text UNIQUE NOT NULL)');
const queue = new Queue({ pool, schema });
const welcomed: number[] = [];

// #region route
/** Runs `work` in a transaction on one connection: COMMIT if it resolves, ROLLBACK if it throws. */
async function transaction<T>(work: (tx: pg.PoolClient) => Promise<T>): Promise<T> {
  const tx = await pool.connect(); // the pool's 'connect' listener hears its 'error' events
  try {
    await tx.query('BEGIN');
    const result = await work(tx);
    await tx.query('COMMIT');
    tx.release();
    return result;
  } catch (err) {
    // Dropped, not pooled, when the ROLLBACK fails (see signUp above).
    await tx.query('ROLLBACK').then(
      () => tx.release(),
      () => tx.release(true),
    );
    throw err;
  }
}

// Without coerceTypes: false, Fastify's Ajv stored the number 12345 as the email "12345" (outside review 251).
const app = Fastify({ ajv: { customOptions: { coerceTypes: false } } });
// Fastify checks the body first: a missing or non-string email is a 400, not a 500 or a stored '{"a":1}'.
const body = { type: 'object', required: ['email'], properties: { email: { type: 'string', minLength: 3 } } };
app.post<{ Body: { email: string } }>('/signup', { schema: { body } }, async (request, reply) => {
  try {
    const user = await transaction(async (tx) => {
      const { rows } = await tx.query('INSERT INTO users (email) VALUES ($1) RETURNING id', [request.body.email]);
      await queue.enqueue('send_welcome', { userId: rows[0].id }, { tx }); // commits or rolls back with the user
      return rows[0];
    });
    return reply.code(201).send(user);
  } catch (err) {
    if ((err as { code?: string }).code === '23505') return reply.code(409).send({ error: 'email already registered' });
    throw err;
  }
});
// #endregion

const worker = new Worker({
  pool,
  schema,
  tasks: { send_welcome: async ({ userId }: { userId: number }) => void welcomed.push(userId) },
});
worker.on('error', (err) => console.error(err.message));
await worker.start();
const url = await app.listen({ port: 0, host: '127.0.0.1' }); // http://127.0.0.1:<a free port>

const signUp = (email: string) =>
  fetch(`${url}/signup`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ email }) });
const first = await signUp('grace@example.com');
const user = (await first.json()) as { id: number };
const second = await signUp('grace@example.com');
const numeric = await fetch(`${url}/signup`, {
  method: 'POST',
  headers: { 'content-type': 'application/json' },
  body: JSON.stringify({ email: 12345 }),
});
const [job] = (await pool.query<{ id: string }>(`SELECT id FROM ${pg.escapeIdentifier(schema)}.jobs`)).rows;
const outcome = job ? await queue.waitFor(job.id, { timeoutMs: 10_000 }) : undefined;
const jobs = (await pool.query(`SELECT 1 FROM ${pg.escapeIdentifier(schema)}.jobs`)).rowCount;

await app.close();
await worker.stop();
await queue.close();
await pool.end();

console.log(`POST /signup → ${first.status} ${JSON.stringify(user)}; again → ${second.status} ${await second.text()}`);
console.log(`POST /signup with a number for the email → ${numeric.status}`);
console.log(`jobs: ${jobs}, ${outcome?.status ?? 'none'}; welcomed user ids: ${welcomed.join(', ')}`);
const ok =
  first.status === 201 &&
  second.status === 409 &&
  numeric.status === 400 &&
  jobs === 1 &&
  outcome?.status === 'completed' &&
  welcomed.join() === String(user.id);
console.log(ok ? 'ok' : 'FAILED');
process.exitCode = ok ? 0 : 1;
