import net from 'node:net';

/**
 * A TCP forwarder to Postgres that can refuse service the way a stopped server
 * does: down() ends every connection and every new one at once.
 */
export async function startGate(upstream: URL) {
  let open = true;
  const sockets = new Set<net.Socket>();
  const server = net.createServer((client) => {
    if (!open) {
      client.destroy();
      return;
    }
    const pg = net.connect(Number(upstream.port || 5432), upstream.hostname || '127.0.0.1');
    sockets.add(client).add(pg);
    client.pipe(pg).pipe(client);
    const end = () => {
      client.destroy();
      pg.destroy();
      sockets.delete(client);
      sockets.delete(pg);
    };
    client.on('error', end).on('close', end);
    pg.on('error', end).on('close', end);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = new URL(upstream.toString());
  url.hostname = '127.0.0.1';
  url.port = String((server.address() as net.AddressInfo).port);
  return {
    url: url.toString(),
    down() {
      open = false;
      for (const s of sockets) s.destroy();
    },
    up() {
      open = true;
    },
    close: () => {
      for (const s of sockets) s.destroy();
      return new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
