import net from 'node:net';

/**
 * A TCP proxy on 127.0.0.1 in front of Postgres, for cutting one client off the
 * way a network partition does: cut() keeps every socket open but stops carrying
 * bytes (a blackhole: no RST, no FIN, so neither side notices by itself);
 * restore() carries them again, including what was sent meanwhile.
 */
export interface TcpProxy {
  /** A connection string through the proxy, made from the upstream one. */
  url: string;
  cut(): void;
  restore(): void;
  close(): Promise<void>;
}

export async function startTcpProxy(upstreamUrl: string): Promise<TcpProxy> {
  const upstream = new URL(upstreamUrl);
  const host = upstream.hostname || '127.0.0.1';
  const port = Number(upstream.port || 5432);
  let cut = false;
  const held: (() => void)[] = [];
  const sockets = new Set<net.Socket>();

  const forward = (from: net.Socket, to: net.Socket) => {
    from.on('data', (chunk) => {
      if (!cut) {
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
    forward(client, server);
    forward(server, client);
    const close = () => {
      client.destroy();
      server.destroy();
      sockets.delete(client);
      sockets.delete(server);
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
    restore: () => {
      cut = false;
      for (const send of held.splice(0)) send();
    },
    close: async () => {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
