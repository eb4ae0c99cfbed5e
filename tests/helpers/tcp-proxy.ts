import net from 'node:net';

/**
 * A TCP proxy on 127.0.0.1 in front of Postgres, for cutting one client off the
 * way a network partition does: cut() keeps every socket open but stops carrying
 * bytes (a blackhole: no RST, no FIN, so neither side notices by itself);
 * restore() carries them again, including what was sent meanwhile.
 * loseReplyTo() lets one statement reach Postgres and cuts its client off before the reply.
 * terminateAtReady() ends the next new connection the way pg_terminate_backend can.
 */
export interface TcpProxy {
  /** A connection string through the proxy, made from the upstream one. */
  url: string;
  cut(): void;
  /**
   * Like cut(), but what is sent meanwhile is lost, and a connection that lost
   * bytes carries nothing more, ever (its protocol state is gone, as after a NAT
   * entry dropped mid-statement); connections idle meanwhile, and new ones, work
   * again after restore().
   */
  drop(): void;
  restore(): void;
  /**
   * Statements still reach Postgres, which runs and commits them, but no reply
   * comes back until restore() (a network slow in one direction).
   */
  holdReplies(): void;
  /**
   * Every connection open now stops carrying bytes for good, without a close (a
   * dropped NAT entry, a failover): only a client that gives it up and connects
   * again gets through. New connections work.
   */
  strand(): void;
  /**
   * The next client message holding `marker` (a statement's text, sent when it is
   * first prepared) reaches Postgres, which runs and commits it; its client's
   * connection is then closed before any reply comes back: a statement that
   * committed with its reply lost. Resolves when that happened.
   */
  loseReplyTo(marker: string): Promise<void>;
  /**
   * The next connection opened is terminated by "the server" as soon as it is
   * ready: its ReadyForQuery and a FATAL 57P01 ErrorResponse reach the client in
   * one packet, then the socket closes (pg_terminate_backend on a fresh backend,
   * whose reply can arrive in the same read). Resolves when that was sent.
   */
  terminateAtReady(): Promise<void>;
  /**
   * The local ports of its connections to Postgres (pg_stat_activity.client_port):
   * tells its sessions from those of test files running beside this one.
   */
  upstreamPorts(): number[];
  close(): Promise<void>;
}

interface Pair {
  /** Nothing more is carried: the connection is going away. */
  doomed: boolean;
  /** Set on the connection to terminate once it is ready (terminateAtReady). */
  terminated?: () => void;
}

/** The protocol's ReadyForQuery message, idle: 'Z', length 5, 'I'. */
const READY_FOR_QUERY = Buffer.from([0x5a, 0, 0, 0, 5, 0x49]);

/** An ErrorResponse as pg_terminate_backend makes the server send it. */
const TERMINATED = errorResponse({
  S: 'FATAL',
  V: 'FATAL',
  C: '57P01',
  M: 'terminating connection due to administrator command',
});

function errorResponse(fields: Record<string, string>): Buffer {
  const body = Buffer.concat([
    ...Object.entries(fields).map(([code, value]) => Buffer.from(`${code}${value}\0`)),
    Buffer.from([0]),
  ]);
  const header = Buffer.alloc(5);
  header.write('E', 0);
  header.writeInt32BE(body.length + 4, 1);
  return Buffer.concat([header, body]);
}

export async function startTcpProxy(upstreamUrl: string): Promise<TcpProxy> {
  const upstream = new URL(upstreamUrl);
  const host = upstream.hostname || '127.0.0.1';
  const port = Number(upstream.port || 5432);
  let cut = false;
  let dropping = false;
  let repliesHeld = false;
  const held: (() => void)[] = [];
  const sockets = new Set<net.Socket>();
  const upstreams = new Set<net.Socket>();
  const pairs = new Set<Pair>();
  let lose: { marker: string; done: () => void } | undefined;
  let terminate: (() => void) | undefined;

  const forward = (from: net.Socket, to: net.Socket, pair: Pair, fromClient: boolean) => {
    from.on('data', (chunk: Buffer) => {
      if (pair.doomed) return; // the reply that is lost
      if (!fromClient && pair.terminated && chunk.includes(READY_FOR_QUERY)) {
        pair.doomed = true;
        to.end(Buffer.concat([chunk, TERMINATED]));
        from.destroy();
        pair.terminated();
        return;
      }
      if (fromClient && lose && chunk.includes(lose.marker)) {
        const { done } = lose;
        lose = undefined;
        pair.doomed = true;
        to.write(chunk);
        from.destroy();
        done();
        return;
      }
      if (dropping) {
        pair.doomed = true;
        return;
      }
      if (!cut && !(repliesHeld && !fromClient)) {
        to.write(chunk);
        return;
      }
      // Hold what was sent during the cut, as a router's buffers would until they give up.
      from.pause();
      held.push(() => {
        to.write(chunk);
        from.resume();
      });
    });
  };

  const server = net.createServer((client) => {
    const server = net.connect(port, host);
    sockets.add(client).add(server);
    upstreams.add(server);
    const pair: Pair = { doomed: false, terminated: terminate };
    terminate = undefined;
    pairs.add(pair);
    forward(client, server, pair, true);
    forward(server, client, pair, false);
    const close = () => {
      client.destroy();
      // Postgres must read the statement that loses its reply before the connection goes.
      if (pair.doomed) setTimeout(() => server.destroy(), 1_000).unref();
      else server.destroy();
      sockets.delete(client);
      sockets.delete(server);
      upstreams.delete(server);
      pairs.delete(pair);
    };
    client.on('error', close).on('close', close);
    server.on('error', close).on('close', close);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address() as net.AddressInfo;
  const url = new URL(upstreamUrl);
  url.hostname = '127.0.0.1';
  url.port = String(address.port);

  return {
    url: url.toString(),
    cut: () => {
      cut = true;
    },
    strand: () => {
      for (const pair of pairs) pair.doomed = true;
    },
    loseReplyTo: (marker) => new Promise<void>((done) => (lose = { marker, done })),
    terminateAtReady: () => new Promise<void>((done) => (terminate = done)),
    drop: () => {
      dropping = true;
    },
    holdReplies: () => {
      repliesHeld = true;
    },
    restore: () => {
      cut = false;
      dropping = false;
      repliesHeld = false;
      for (const send of held.splice(0)) send();
    },
    upstreamPorts: () => [...upstreams].flatMap((socket) => (socket.localPort === undefined ? [] : [socket.localPort])),
    close: async () => {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
