import { inspect } from 'node:util';
import type { Queryable } from '../db/executor.js';
import { ConfigError, wrapDatabaseError } from '../errors.js';
import { maintenanceStatements, type MaintenanceStatements } from '../db/statements/maintenance.js';

/** The lease row every worker competes for; one holder per schema and role. */
export const MAINTENANCE_ROLE = 'maintenance';

export interface LeaseHolder {
  holder: string;
  elected_at: Date;
  expires_at: Date;
  live: boolean;
}

/**
 * One worker's side of the leader lease. `tryAcquire` takes a free or expired
 * lease, or renews the one it holds, and reports whether it holds it now. The
 * lease is trusted locally only until `validUntil` (measured from *before* the
 * renewal was sent), so a leader cut off from Postgres stops leading before
 * another worker can take over.
 */
export class Lease {
  private heldUntil = 0;

  constructor(
    private readonly db: Queryable,
    private readonly queries: MaintenanceStatements,
    readonly holderId: string,
    readonly leaseMs: number,
    readonly role = MAINTENANCE_ROLE,
  ) {}

  /** True while the last successful renewal is younger than the lease. */
  get held(): boolean {
    return Date.now() < this.heldUntil;
  }

  /** How long the last successful renewal stays valid; 0 when not held. */
  get remainingMs(): number {
    return Math.max(0, this.heldUntil - Date.now());
  }

  async tryAcquire(): Promise<boolean> {
    const sentAt = Date.now();
    const { rows } = await this.db.query(this.queries.acquireLease, [this.holderId, this.role, this.leaseMs]);
    this.heldUntil = rows.length > 0 ? sentAt + this.leaseMs : 0;
    return rows.length > 0;
  }

  /** Gives the lease up so another worker can take it without waiting for expiry. */
  async resign(): Promise<void> {
    this.heldUntil = 0;
    await this.db.query(this.queries.resignLease, [this.holderId, this.role]);
  }
}

/**
 * Who holds the maintenance lease of a schema, if anyone (for tests, doctor,
 * dashboards): `currentLeader(pool, 'sluice')`. Takes the schema's name, or its
 * statements (buildMaintenanceQueries(schema)); given a name, it threw pg's "Client
 * was passed a null or undefined query" (outside review 164).
 *
 * @example
 *   const leader = await currentLeader(pool, 'sluice'); // { holder, elected_at, expires_at, live } or undefined
 */
export async function currentLeader(
  db: Queryable,
  schema: string | MaintenanceStatements,
  role = MAINTENANCE_ROLE,
): Promise<LeaseHolder | undefined> {
  if (typeof schema !== 'string' && typeof (schema as Partial<MaintenanceStatements> | null)?.currentLease !== 'string') {
    throw new ConfigError(`currentLeader: schema must be the schema's name, got ${inspect(schema)}`);
  }
  const queries = typeof schema === 'string' ? maintenanceStatements(schema) : schema;
  try {
    const { rows } = await db.query(queries.currentLease, [role]);
    return rows[0] as LeaseHolder | undefined;
  } catch (err) {
    // As the admin API's reads: a SluiceError, with the hint to migrate where the table is missing (outside review 165).
    throw wrapDatabaseError(err, 'currentLeader failed');
  }
}
