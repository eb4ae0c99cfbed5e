import { quoteSchema } from '../identifiers.js';
import { jobColumns, pageColumns, payloadLength } from './job-columns.js';
import { perSchema } from './per-schema.js';

/** The dashboard's job search by a payload field (src/admin/search.ts, searchJobs), for one schema. */
export interface SearchStatements {
  /**
   * $1 statuses, $2 queues, $3 tasks (text[] or NULL: any), $4 the `before` id
   * cursor (NULL: from the newest), $5 rows, $6 the field's path (text[]),
   * $7 its value as text. Newest first.
   */
  readonly byPayloadField: string;
}

export const searchStatements = perSchema((schema: string): SearchStatements => {
  const s = quoteSchema(schema);
  const filters = (row: 'j' | 'x', payload: 'j.payload' | 'x.payload') => `($1::text[] IS NULL OR ${row}.status = ANY($1::text[]))
      AND ($2::text[] IS NULL OR ${row}.queue = ANY($2::text[]))
      AND ($3::text[] IS NULL OR ${row}.task = ANY($3::text[]))
      AND ($4::bigint IS NULL OR ${row}.id < $4::bigint)
      AND ${payload} #>> $6::text[] = $7::text`;
  return {
    // No index serves an arbitrary payload field: each branch walks its id index
    // down from the cursor and stops after $5 matches, as the job list does, so a
    // common value is found at once and a rare one costs a longer walk. The field
    // compares as text (#>>), so 42 and "42" both match "42", as a person typing
    // it into a search box means. The archived branch reads the payload out of
    // the stored row without rebuilding rows that do not match.
    byPayloadField: `SELECT ${pageColumns('$8')}
      FROM (SELECT * FROM (
        (SELECT ${jobColumns('j')}, false AS archived FROM ${s}.jobs j
          WHERE ${filters('j', 'j.payload')}
          ORDER BY j.id DESC LIMIT $5)
        UNION ALL
        (SELECT ${jobColumns('h')}, true AS archived FROM (
            SELECT x.id, x.job FROM (SELECT *, job -> 'payload' AS payload FROM ${s}.jobs_history) x
            WHERE ${filters('x', 'x.payload')}
            ORDER BY x.id DESC LIMIT $5
          ) m CROSS JOIN LATERAL jsonb_populate_record(NULL::${s}.jobs, m.job) h)
      ) page ORDER BY page.id::bigint DESC LIMIT $5) page
      ${payloadLength('$8')}
      ORDER BY page.id::bigint DESC`,
  };
});
