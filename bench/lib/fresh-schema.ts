import type { BenchContext } from './context.js';
import { ScratchSchema } from './database.js';
import { ClientProcess } from './processes.js';
import type { System } from './systems.js';

/**
 * Runs `body` with `system` installed in a schema of its own, made for this call:
 * a client process has installed it and stays open for `body` (which may close it
 * early). The schema is dropped afterwards, whatever happens.
 */
export async function inFreshSchema<T>(
  ctx: BenchContext, system: System, scenario: string,
  body: (db: ScratchSchema, client: ClientProcess) => Promise<T>,
): Promise<T> {
  const db = new ScratchSchema(ctx.url, `${scenario}_${system.label}`);
  let client: ClientProcess | undefined;
  try {
    client = await ClientProcess.start(system, { url: ctx.url, schema: db.schema });
    await client.install();
    return await body(db, client);
  } finally {
    await client?.close().catch(() => {});
    await db.drop();
  }
}
