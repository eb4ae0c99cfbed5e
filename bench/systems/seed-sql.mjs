// The seed pattern as a benchmark system (enqueue only; see bench/systems/process.mjs):
// a plain jobs table, a plain INSERT per job with a per-row NOTIFY trigger, and a
// plain `unnest` INSERT for batches. What an enqueue costs with no queue library:
// the baseline Sluice's single and bulk enqueue are held against.
import pg from 'pg';

const quote = (schema) => `"${schema.replace(/"/g, '""')}"`;

export async function install({ url, schema }) {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  const s = quote(schema);
  try {
    await client.query(`
      CREATE SCHEMA ${s};
      CREATE TABLE ${s}.jobs (
        id bigserial PRIMARY KEY,
        task text NOT NULL,
        payload jsonb NOT NULL DEFAULT '{}',
        status text NOT NULL DEFAULT 'pending',
        run_at timestamptz NOT NULL DEFAULT now(),
        attempts int NOT NULL DEFAULT 0,
        created_at timestamptz NOT NULL DEFAULT now()
      );
      CREATE INDEX jobs_pending ON ${s}.jobs (run_at, id) WHERE status = 'pending';
      CREATE FUNCTION ${s}.notify_job() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN PERFORM pg_notify('jobs', NEW.id::text); RETURN NEW; END $$;
      CREATE TRIGGER jobs_notify AFTER INSERT ON ${s}.jobs
        FOR EACH ROW EXECUTE FUNCTION ${s}.notify_job();`);
  } finally {
    await client.end();
  }
}

export async function openClient({ url, schema }) {
  const s = quote(schema);
  const pool = new pg.Pool({ connectionString: url, max: 10 });
  pool.on('error', () => {});
  const insert = `INSERT INTO ${s}.jobs (task, payload) VALUES ($1, $2::jsonb)`;
  const insertMany = `INSERT INTO ${s}.jobs (task, payload) SELECT * FROM unnest($1::text[], $2::jsonb[])`;
  return {
    enqueue: (i) => pool.query({ name: 'enqueue', text: insert, values: ['noop', JSON.stringify({ i })] }),
    enqueueMany: (is) => pool.query({
      name: 'enqueue-many', text: insertMany,
      values: [is.map(() => 'noop'), is.map((i) => JSON.stringify({ i }))],
    }),
    close: () => pool.end(),
  };
}
