import { EventEmitter } from 'node:events';
import { ListenerError } from '../errors.js';
import { errorFields } from '../logger.js';

type Listener = (...args: unknown[]) => unknown;

/**
 * An EventEmitter whose listeners cannot break the code that emits. Node's emit()
 * lets a listener's exception out to the emitter and skips the event's other
 * listeners: a 'job:start' listener that threw left its claim's jobs 'processing',
 * never run, their locks renewed for as long as the worker lived (outside review
 * 155). Here each listener is called on its own; what one throws, or a promise it
 * returns rejects with, becomes an 'error' event (ListenerError). What an 'error'
 * listener throws becomes a process warning: reporting it as another 'error' could
 * loop.
 */
export class ListenerSafeEmitter<T extends Record<keyof T, unknown[]>> extends EventEmitter<T> {
  constructor() {
    super();
    // An own property over EventEmitter's emit: its typed overloads stay what callers see.
    this.emit = safeEmit as unknown as this['emit'];
  }
}

function safeEmit(this: EventEmitter, event: string | symbol, ...args: unknown[]): boolean {
  const listeners = this.rawListeners(event) as Listener[];
  // No 'error' listener: Node's own behaviour (it throws), for the callers that rely on it.
  if (listeners.length === 0) return event === 'error' ? EventEmitter.prototype.emit.call(this, event, ...args) : false;
  for (const listener of listeners) {
    try {
      const returned = listener.apply(this, args);
      if (isThenable(returned)) returned.then(undefined, (err: unknown) => listenerFailed(this, event, err));
    } catch (err) {
      listenerFailed(this, event, err);
    }
  }
  return true;
}

/** Never throws: whatever was thrown is reported, however hostile (outside review 157). */
function listenerFailed(emitter: EventEmitter, event: string | symbol, err: unknown): void {
  const name = String(event);
  if (event === 'error' || emitter.listenerCount('error') === 0) {
    process.emitWarning(`sluice: a '${name}' listener threw: ${errorFields(err).message}`, { code: 'SLUICE_LISTENER' });
    return;
  }
  emitter.emit('error', new ListenerError(name, err));
}

function isThenable(value: unknown): value is PromiseLike<unknown> {
  return typeof (value as { then?: unknown } | null)?.then === 'function';
}
