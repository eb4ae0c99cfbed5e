/**
 * Makes every parameter of a statement invisible to the planner's estimates, so
 * that Postgres settles on one generic plan for a named prepared statement.
 *
 * Postgres plans the first five executions of a prepared statement with the
 * actual values (custom plans), then keeps a generic plan only if its estimated
 * cost is below the custom plans' average. The worker cycle carries arrays and a
 * LIMIT whose sizes vary from 1 to the batch size: with small ones the custom plans
 * looked cheaper, so every cycle was planned anew (measured: 1,001 custom plans in
 * 1,001 cycles of 20 jobs, ~1 ms of server CPU each; a one-job cycle cost 2.4 ms
 * instead of 0.75 ms). Written as `(SELECT $n::type)::type`, a value reaches the
 * plan as the output of an InitPlan, which no estimate can see into, so a custom
 * plan costs what the generic one does plus its planning, and the generic plan is
 * kept from the sixth execution on. The statements are written for the generic
 * plan anyway (see cycleStatement).
 *
 * Every `$n` outside comments must carry a cast (`$1::text`): the rewrite needs the
 * type, and a parameter left out would bring the custom plans back.
 */
export function withGenericPlan(sql: string): string {
  const rewritten = sql.replace(/\$(\d+)(::[a-z0-9_]+(?:\[\])?)/g, '(SELECT $$$1$2)$2');
  const bare = rewritten.replace(/--[^\n]*/g, '').match(/\$\d+(?!\d|::)/);
  if (bare) throw new Error(`withGenericPlan: parameter ${bare[0]} has no cast`);
  return rewritten;
}
