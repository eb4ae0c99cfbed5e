import { request, type ClientRequest } from 'node:http';

export interface EventStream {
  /** Resolves with the data of the next event of that name (events already received count). */
  next(event: string, match?: (data: any) => boolean): Promise<any>;
  close(): void;
}

/** Reads a server-sent events stream the way a browser's EventSource would. */
export function openEventStream(url: string, headers: Record<string, string> = {}): Promise<EventStream> {
  return new Promise((resolve, reject) => {
    const received: { event: string; data: any }[] = [];
    const waiters: { event: string; match: (d: any) => boolean; resolve: (d: any) => void }[] = [];
    const deliver = () => {
      for (const w of [...waiters]) {
        const i = received.findIndex((r) => r.event === w.event && w.match(r.data));
        if (i >= 0) {
          waiters.splice(waiters.indexOf(w), 1);
          w.resolve(received.splice(i, 1)[0]!.data);
        }
      }
    };
    const req: ClientRequest = request(url, { headers: { accept: 'text/event-stream', ...headers } }, (res) => {
      if (res.statusCode !== 200) {
        reject(new Error(`event stream answered ${res.statusCode}`));
        res.resume();
        return;
      }
      let buffer = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => {
        buffer += chunk;
        let end: number;
        while ((end = buffer.indexOf('\n\n')) >= 0) {
          const block = buffer.slice(0, end);
          buffer = buffer.slice(end + 2);
          const event = /^event: (.*)$/m.exec(block)?.[1];
          const data = /^data: (.*)$/m.exec(block)?.[1];
          if (event && data !== undefined) received.push({ event, data: JSON.parse(data) });
        }
        deliver();
      });
      resolve({
        next: (event, match = () => true) =>
          new Promise((res2) => {
            waiters.push({ event, match, resolve: res2 });
            deliver();
          }),
        close: () => req.destroy(),
      });
    });
    req.on('error', (err) => {
      if ((err as NodeJS.ErrnoException).code !== 'ECONNRESET') reject(err);
    });
    req.end();
  });
}
