import type { Command } from 'commander';
import { Option } from 'commander';
import { OutboxRelay } from '../../outbox/relay.js';
import { outboxLag } from '../../outbox/lag.js';
import { dropOutboxDeadLetters, listOutboxDeadLetters, redriveOutboxDeadLetters } from '../../outbox/dead-letters.js';
import { natsPublisher } from '../../outbox/publishers/nats.js';
import { rabbitMqPublisher } from '../../outbox/publishers/rabbitmq.js';
import type { MetricsServer } from '../../metrics/server.js';
import { loggedWaitNotice, withDatabaseUntilStopped } from '../database.js';
import { ErrorLines } from '../error-lines.js';
import { FailureLines } from '../failure-lines.js';
import { ExitStatus, UsageError, formatTime, printable, printJson } from '../output.js';
import { onOutputClosed } from '../output-closed.js';
import { StopSignals } from '../repeated-signal.js';
import { addMetricsOptions, type MetricsFlags } from '../metrics-options.js';
import { collect, integer } from '../parse.js';
import { addPoolerOptions, type PoolerFlags } from '../pooler-options.js';

interface RelayFlags extends MetricsFlags, PoolerFlags {
  broker: 'nats' | 'rabbitmq';
  destination?: string[];
  natsUrl?: string[];
  subjectPrefix: string;
  amqpUrl: string;
  exchange: string;
  partitions: number;
  maxPartitions?: number;
  batchSize: number;
  maxAttempts: number;
  status?: boolean;
  deadLetters?: boolean;
  redrive?: boolean;
  dropDeadLetters?: boolean;
  json?: boolean;
}

/** The flags that make `sluice relay` do one thing and exit, instead of relaying. */
const ACTIONS = [
  ['status', '--status'],
  ['deadLetters', '--dead-letters'],
  ['redrive', '--redrive'],
  ['dropDeadLetters', '--drop-dead-letters'],
] as const satisfies readonly (readonly [keyof RelayFlags, string])[];

/**
 * The NATS servers: every --nats-url, each split at commas (a repeated one kept only
 * the last, and a list was refused: no cluster could be given, outside review 248),
 * else SLUICE_NATS_URL when it is not empty (as compose files leave an unset one),
 * else the local default.
 */
function natsServers(given: string[] | undefined): string[] {
  const env = process.env.SLUICE_NATS_URL?.trim();
  const urls = given ?? [env ? env : 'nats://127.0.0.1:4222'];
  return urls.flatMap((url) => url.split(',')).map((url) => url.trim());
}

/** What only relaying uses: refused with an action, which would ignore it. */
const RELAYING_ONLY = [
  'broker',
  'natsUrl',
  'subjectPrefix',
  'amqpUrl',
  'exchange',
  'partitions',
  'maxPartitions',
  'batchSize',
  'maxAttempts',
  'metricsPort',
  'metricsHost',
];

export function registerRelay(program: Command): void {
  const command = program
    .command('relay')
    .description('publish committed outbox messages to NATS JetStream or RabbitMQ until SIGINT/SIGTERM')
    .addOption(new Option('--broker <name>', 'where messages go').choices(['nats', 'rabbitmq']).default('nats'))
    .option('--destination <name>', 'destination to relay (repeatable; required unless --status)', collect)
    .option('--nats-url <url>', 'NATS server; repeat it, or separate with commas, for a cluster (env: SLUICE_NATS_URL)', collect)
    .option('--subject-prefix <prefix>', 'NATS: prepended to the destination to make the subject', '')
    .option(
      '--amqp-url <url>',
      'RabbitMQ server (env: SLUICE_AMQP_URL)',
      process.env.SLUICE_AMQP_URL ?? 'amqp://guest:guest@127.0.0.1:5672',
    )
    .option('--exchange <name>', 'RabbitMQ: exchange to publish to; the destination is the routing key', '')
    .option('--partitions <n>', 'partitions per destination (the same in every relay)', integer(1, 1024), 1)
    .option('--max-partitions <n>', 'most partitions this process holds (default: all)', integer(1, 1_000_000))
    .option('--batch-size <n>', 'rows read per window (largest batch sent to the broker)', integer(1, 100_000), 2000)
    .option('--max-attempts <n>', 'refusals of one message before it becomes a dead letter', integer(1, 1000), 10);
  addMetricsOptions(addPoolerOptions(command))
    .option('--status', "print every destination's lag and exit")
    .option('--dead-letters', 'print the dead letters (of the --destination(s), or all) and exit')
    .option('--redrive', "put the --destination(s)' dead letters back into the outbox as new messages, and exit")
    .option('--drop-dead-letters', "delete the --destination(s)' dead letters for good, and exit")
    .option('--json', 'JSON lines instead of text')
    .addHelpText(
      'after',
      `
Run several relays for availability: each partition of each destination has one
active relay, and another takes over within the lease (10s) when it dies. With
--partitions P and N processes, --max-partitions ceil(P/N) shares the load.

Examples:
  sluice relay --destination orders.paid --destination orders.shipped --subject-prefix app.
  sluice relay --broker rabbitmq --exchange events --destination orders.paid --partitions 4 --max-partitions 2
  sluice relay --destination orders.paid --metrics-port 9465
  sluice relay --status --json
  sluice relay --dead-letters --destination orders.paid
  sluice relay --redrive --destination orders.paid`,
    )
    .action(async (flags: RelayFlags, command: Command) => {
      const log = (event: string, fields: Record<string, unknown> = {}, stream: NodeJS.WritableStream = process.stdout) => {
        // stderr for failures with --json too, as the text lines (outside review 122).
        if (flags.json) return printJson({ time: new Date(), event, ...fields }, stream);
        // A key with a line break (written past publish()) quoted, so an entry stays one line (outside review 122).
        const rest = Object.entries(fields).map(([k, v]) => `${k}=${printable(v instanceof Date ? formatTime(v) : String(v))}`);
        stream.write(`${formatTime(new Date())} ${event}${rest.length ? ` ${rest.join(' ')}` : ''}\n`);
      };
      // One action per run: `--redrive --drop-dead-letters` redrove and silently dropped nothing (review 62).
      const actions = ACTIONS.filter(([flag]) => flags[flag]).map(([, name]) => name);
      if (actions.length > 1) throw new UsageError(`${actions.join(' and ')} are separate actions: give one of them`);
      const given = (name: string) => command.getOptionValueSource(name) === 'cli';
      const refuse = (names: string[], what: string) => {
        if (names.length === 0) return;
        const flagNames = names.map((n) => `--${n.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)}`).join(' and ');
        throw new UsageError(`${flagNames} ${names.length > 1 ? 'are' : 'is'} not for ${what}`);
      };
      // Options of relaying given to an action that ignores them: `--status --partitions 3`
      // exited 0 as if they had been used (outside review 247).
      if (actions.length > 0) refuse(RELAYING_ONLY.filter(given), actions[0]!);
      // The other broker's options were taken without a word (outside review 166: --subject-prefix with rabbitmq).
      refuse(
        (flags.broker === 'nats' ? ['amqpUrl', 'exchange'] : ['natsUrl', 'subjectPrefix']).filter(given),
        `--broker ${flags.broker}`,
      );
      // Relaying: its broker's client library first, before any wait for Postgres (outside
      // review 167: a relay without nats waited for a Postgres that was down, then exited 2).
      const publisher =
        actions.length > 0
          ? undefined
          : flags.broker === 'nats'
            ? natsPublisher({ servers: natsServers(flags.natsUrl), subjectPrefix: flags.subjectPrefix })
            : rabbitMqPublisher({ url: flags.amqpUrl, exchange: flags.exchange });
      await publisher?.prepare?.();
      await withDatabaseUntilStopped(
        command,
        async ({ pool, url, schema, started }) => {
          if (flags.status) {
            // Only the --destination(s) when given (outside review 166: the filter was ignored).
            const lags = (await outboxLag(pool, schema)).filter(
              (l) => !flags.destination || flags.destination.includes(l.destination),
            );
            for (const lag of lags) log('lag', { ...lag });
            // Silence would read as "nothing to report" and "not set up" alike; so would
            // leaving out the unknown ones of several --destination(s) (outside review 251).
            const shown = new Set(lags.map((l) => l.destination));
            const unknown = flags.destination?.filter((d) => !shown.has(d)) ?? [];
            if (lags.length === 0 || unknown.length > 0) {
              const where = unknown.length > 0 ? `destination ${unknown.join(', ')}` : 'any destination of this schema';
              log('no-destinations', { note: `no relay has started on ${where} yet` });
            }
            return;
          }
          if (flags.deadLetters) {
            const letters = await listOutboxDeadLetters(pool, schema, { destinations: flags.destination, limit: 1000 });
            for (const letter of letters) log('dead_letter', { ...letter });
            if (letters.length === 0) log('no-dead-letters');
            return;
          }
          if (flags.redrive || flags.dropDeadLetters) {
            if (!flags.destination?.length) throw new UsageError('give the --destination(s) whose dead letters to act on');
            // A misspelt destination redrove nothing and exited 0 (outside review 166), as `jobs retry --failed --queue` does not.
            const known = new Set((await outboxLag(pool, schema)).map((l) => l.destination));
            const unknown = flags.destination.filter((d) => !known.has(d));
            if (unknown.length > 0) {
              throw new UsageError(`no relay has ever run destination ${unknown.join(', ')} (sluice relay --status lists them)`);
            }
            const target = { destinations: flags.destination };
            if (flags.redrive) log('redriven', { count: await redriveOutboxDeadLetters(pool, schema, target) });
            else log('dropped', { count: await dropOutboxDeadLetters(pool, schema, target) });
            return;
          }
          if (!flags.destination?.length) throw new UsageError('give at least one --destination (or --status)');
          const relay = new OutboxRelay({
            connectionString: url,
            schema,
            publisher: publisher!,
            destinations: flags.destination,
            partitions: flags.partitions,
            maxPartitions: flags.maxPartitions,
            batchSize: flags.batchSize,
            maxAttempts: flags.maxAttempts,
            listenConnectionString: flags.listenUrl,
            preparedStatements: flags.preparedStatements,
          });
          let published = 0;
          relay.events.on('published', (b) => (published += b.count));
          relay.events.on('acquired', (p) => log('acquired', { ...p }));
          relay.events.on('lost', (p) => log('lost', { ...p }));
          relay.events.on('deadLetter', (d) =>
            log(
              'dead_letter',
              { destination: d.destination, message: d.messageId, attempts: d.attempts, error: d.error.message },
              process.stderr,
            ),
          );
          relay.events.on('warning', (w) => log('warning', { destination: w.destination, note: w.message }, process.stderr));
          const failures = new FailureLines();
          relay.events.on('failure', (f) => {
            if (!failures.shouldLog(f)) return;
            const where = { destination: f.destination, partition: f.partition };
            log('failure', { ...where, transient: f.transient, error: f.error.message }, process.stderr);
          });
          // A partition whose failure was logged says when it publishes again (outside review 198: a
          // full queue's one failure line, then silence, and no word when it drained).
          relay.events.on('published', (b) => {
            if (failures.published(b)) log('recovered', { destination: b.destination, partition: b.partition });
          });
          const errors = new ErrorLines();
          relay.events.on('error', (err) => {
            const line = errors.next(err.message);
            if (line) log('error', { error: err.message, ...(line.repeated > 0 && line) }, process.stderr);
          });
          const wentThrough = () => {
            if (errors.wentThrough()) log('recovered');
          };
          for (const event of ['published', 'caughtUp', 'acquired'] as const) relay.events.on(event, wentThrough);
          // Before the relay connects: a missing prom-client or a taken port fails the command with nothing opened.
          const metrics =
            flags.metricsPort === undefined ? undefined : await serveRelayMetrics(relay, flags.metricsPort, flags.metricsHost);
          const stopped = untilSignal(relay);
          let outputClosed: boolean;
          try {
            await relay.start();
            started();
            log('started', {
              relay: relay.options.relayId,
              broker: flags.broker,
              destinations: flags.destination.join(','),
              ...(metrics && { metrics: metrics.url }),
            });
            const progress = setInterval(() => log('progress', { published }), 10_000);
            progress.unref();
            outputClosed = await stopped;
            clearInterval(progress);
          } finally {
            await metrics?.close();
          }
          log('stopped', { published });
          if (outputClosed) throw new ExitStatus(1);
        },
        // Serving (not a one-off action), it waits for a Postgres it cannot reach yet, as `sluice worker` does.
        {
          waitForPostgres: actions.length === 0,
          ...(flags.json && { notice: loggedWaitNotice(log) }),
          // What the relay's role (sluice_outbox_relay) may read: not the jobs table.
          probe: (q) => q.outboxProbe,
        },
      );
    });
}

/**
 * RelayMetrics for this relay, served as `sluice worker`'s Worker serves its own
 * (src/metrics/server.ts). prom-client is loaded only when a port is given.
 */
async function serveRelayMetrics(relay: OutboxRelay, port: number, host: string): Promise<MetricsServer> {
  const [{ RelayMetrics }, { serveMetrics }] = await Promise.all([
    import('../../metrics/relay-metrics.js'),
    import('../../metrics/server.js'),
  ]);
  const metrics = new RelayMetrics();
  metrics.observe(relay);
  const { registry } = metrics;
  return serveMetrics({ text: () => registry.metrics(), contentType: registry.contentType }, port, host);
}

/**
 * Resolves once the relay has stopped after SIGINT/SIGTERM (false) or stdout's
 * reader went away (true: exit 1); a second signal exits at once.
 */
function untilSignal(relay: OutboxRelay): Promise<boolean> {
  return new Promise((resolve, reject) => {
    let signalled = false;
    const signals = new StopSignals();
    const stop = (outputClosed: boolean) => {
      signalled = true;
      relay.stop().then(() => {
        signals.settled();
        resolve(outputClosed);
      }, reject);
    };
    const onSignal = () => {
      const kind = signals.next();
      if (kind === 'echo') return;
      if (kind === 'force' || signalled) process.exit(1);
      stop(false);
    };
    process.on('SIGINT', onSignal);
    process.on('SIGTERM', onSignal);
    // bin/sluice.js's handler for the signals that come while the CLI loads and the relay starts leaves them to these now.
    (globalThis as Record<symbol, unknown>)[Symbol.for('sluice.cli.signalsTaken')] = true;
    onOutputClosed((err) => {
      if (signalled) return;
      process.stderr.write(`sluice relay: stdout closed (${err.message}): stopping\n`);
      stop(true);
    });
  });
}
