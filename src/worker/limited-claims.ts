import type { WorkerStore } from '../db/worker-store.js';
import { isDataRejection } from '../errors.js';
import { Backoff } from '../lifecycle/backoff.js';
import type { ClaimTarget } from './claim-target.js';

/** What the claims of a worker's limited queues got. */
export interface LimitedOutcome {
  /** Some queue filled every slot it asked for, so it may have more. */
  more: boolean;
  /** Jobs each claim statement sent gave, in order (one per queue asked). */
  perStatement: number[];
}

/** What the fetch loop's cycles in flight asked for, which a claim here must not take again. */
export interface Requested {
  /** Jobs asked for. */
  jobs: number;
  /** Of those, how many their claims start at once. */
  starts: number;
}

/**
 * The claims of the queues that go through claim_queue(): a local or a global
 * limit, groups, a rate limit. One statement per queue, each asking for what the
 * worker may take of it. One such round at a time per worker (`busy`): two
 * would count the same free slots twice.
 */
export class LimitedClaims {
  busy = false;
  /**
   * The last round asked every limited queue and found nothing there, no limit
   * holding jobs back, and nothing woke the worker for them since (see stir()).
   * Beside plain queues, slots kept for empty claims and claims not taken ahead cost
   * short plain jobs four fifths of their rate (outside review 133): while quiet,
   * the plain queues are served as if alone.
   */
  quiet = false;
  /** Bumped by stir(): a round that started before one cannot say the queues are quiet. */
  private stirs = 0;
  /**
   * While a round runs, the queues stirred since it began ('' for all): a queue
   * stirred during its own claim may have been woken by what that claim did not see.
   * None between rounds, so a stream of notifications for queues this worker does
   * not serve keeps nothing.
   */
  private stirredInRound: Set<string> | undefined;
  /**
   * Queues whose last claim found nothing (no job, no retry time) with nothing
   * stirred for them since, by when to ask them again all the same (ms since epoch).
   * A round asks its queues one after another: beside one busy limited queue, seven
   * empty ones asked at each round kept the busy one's slots idle half the time
   * (outside review 275). Asked again early when stirred: a notification for the
   * queue, one of its jobs ending here, or a wake for every queue (a poll tick, a due
   * time, a look at limits holding jobs back).
   */
  private readonly idle = new Map<string, number>();
  /** The stir after which the limited queues were last checked for due jobs (see settle()). */
  private checked = -1;
  /** Where the next round starts in the list of queues (see claim()). */
  private next = 0;
  /** Whose the odd slot of a claim is, the limited queues' or the plain ones' (see share()). */
  private oddToLimited = false;
  /**
   * Queues whose claims came back empty, told to come back in a moment (their
   * row or a group held by another session): each such answer in a row waits
   * twice as long, up to a second. A claim holds them for milliseconds, but an
   * open transaction that changed the queue's settings ({ tx }) holds its row until
   * it ends: idle workers came back every 5-7 ms meanwhile (outside review 72).
   */
  private readonly held = new Map<string, Backoff>();
  /**
   * Due jobs that limits held back from the last round, which found nothing: look
   * again soon. A slot that frees in another worker wakes only that worker, whose
   * claim may fill it with another group's job (the next in turn) and leave the
   * freed group's slot to whoever asks next; this worker asked next only at its poll
   * (2 s by default), its slots idle all along (issue 16). Each look is an empty
   * claim and an EXISTS, a fraction of a millisecond of server time; the looks
   * slow down to one a second while limits hold jobs back and nothing here claims
   * (a serial queue's long job keeps every idle worker of it looking: about two
   * rounds a second with the poll's, not forty).
   */
  private readonly heldByLimits = new Backoff({ minMs: 25, maxMs: 1_000 });
  /**
   * When the look scheduled last comes (ms since epoch). One at a time: the fetch
   * loop keeps every due time it is given, so a look scheduled by each empty round
   * (a poll tick's, a finished job's) started a chain of its own beside the others,
   * and an idle worker came to 10-18 claims a second (outside review 143).
   */
  private lookAt = 0;

  constructor(
    private readonly store: WorkerStore,
    private readonly config: { tasks: readonly string[]; batchSize: number },
    private readonly target: ClaimTarget,
    private readonly requested: () => Requested,
    private readonly wakeAt: (at: number) => void,
    private readonly onError: (err: unknown) => void,
    /** A claim failed after it may have committed: its jobs may be locked to this worker, unknown to it. */
    private readonly claimLost: () => void,
    /** The clock (ms since epoch), for tests. */
    private readonly now: () => number = Date.now,
  ) {}

  /**
   * Claims from each queue what the worker may take of it (global, group and rate
   * limits are applied by claim_queue() in the database): its free slots start
   * now, and the rest is claimed ahead only where no limit counts it (a local
   * limit: see Slots.wantedIn; the others: claim_queue() in migration 0019).
   * `ownLimit` and `ownStarts` are what the calling cycle asked for: the jobs and
   * free slots of the other cycle in flight are not this claim's. `finished`: jobs
   * done for good whose results are being written beside these claims, not
   * running any more (migration 0022). Errors are reported and leave the queues to the next cycle;
   * they must not undo the cycle's writes.
   */
  async claim(
    queues: readonly string[],
    ownLimit: number,
    ownStarts: number,
    finished: readonly string[],
  ): Promise<LimitedOutcome> {
    let more = false;
    const perStatement: number[] = [];
    const stirsBefore = this.stirs;
    let empty = true;
    // Each round starts after the queue that claimed first in the last round that
    // claimed anything: with few free slots the first queues asked took them all, and
    // the last one listed ran next to nothing (outside review 130). Rounds that claim
    // nothing do not move it: counted per round, the turn moved by two while plain
    // and limited queues took turns for one slot, and of two limited queues one never
    // ran (outside review 133).
    const first = this.next % Math.max(1, queues.length);
    let moved = false;
    this.stirredInRound = new Set();
    for (const queue of [...queues.slice(first), ...queues.slice(0, first)]) {
      const requested = this.requested();
      const othersAsked = Math.max(0, requested.jobs - ownLimit);
      const max = Math.min(this.target.wantedIn(queue) - othersAsked, this.config.batchSize);
      if (max <= 0) {
        empty = false;
        continue;
      }
      if ((this.idle.get(queue) ?? 0) > this.now()) continue;
      const startNow = Math.min(max, Math.max(0, this.target.free() - (requested.starts - ownStarts)));
      try {
        const sentAt = performance.now();
        const { jobs, retryAt } = await this.store.claimLimited(queue, this.config.tasks, max, startNow, finished);
        perStatement.push(jobs.length);
        const unstirred = !this.stirredInRound?.has('') && !this.stirredInRound?.has(queue);
        if (jobs.length === 0 && retryAt === null && unstirred) this.idle.set(queue, this.now() + IDLE_MS);
        else this.idle.delete(queue);
        if (jobs.length > 0 || retryAt !== null) empty = false;
        if (jobs.length > 0 && !moved) {
          moved = true;
          this.next = queues.indexOf(queue) + 1;
        }
        if (jobs.length >= max) more = true;
        // A rate limit (or a group another claimer held) held jobs back: claim again
        // when claim_queue() said, not before.
        if (retryAt !== null) this.wakeAt(this.notBefore(queue, retryAt, jobs.length));
        else this.held.delete(queue);
        if (jobs.length > 0) {
          // The next look (if limits hold jobs back again) comes soon, not after the one scheduled.
          this.heldByLimits.reset();
          this.lookAt = 0;
          this.target.claimed(jobs, performance.now() - sentAt);
        }
      } catch (err) {
        // Not "more": a persistent error would spin. The next poll tries again. An
        // exception from the target (an event listener) lands here too: the jobs
        // it was given are its own by then.
        empty = false;
        if (!isDataRejection(err)) this.claimLost();
        this.onError(err);
      }
    }
    this.stirredInRound = undefined;
    if (empty && this.stirs === stirsBefore && this.checked !== this.stirs) await this.settle(queues, stirsBefore);
    return { more, perStatement };
  }

  /**
   * Every limited queue's claim came back empty: quiet, unless some have due jobs
   * that their limits (a queue or group limit reached, here or elsewhere) hold back.
   * Asked once per stir: a queue at its limit is stirred again when a slot frees
   * here, or when the look scheduled here (heldByLimits) comes.
   */
  private async settle(queues: readonly string[], stirsBefore: number): Promise<void> {
    this.checked = stirsBefore;
    try {
      const due = await this.store.hasDueJobs(queues, this.config.tasks);
      this.quiet = !due && this.stirs === stirsBefore;
      if (!due) this.heldByLimits.reset();
      else if (this.lookAt <= this.now()) this.wakeAt((this.lookAt = this.now() + this.heldByLimits.next()));
    } catch (err) {
      this.onError(err);
    }
  }

  /**
   * Something may be due in `queue`, or in any limited queue when none is named (a
   * wake other than a plain queue's notification): not quiet.
   */
  stir(queue?: string): void {
    this.quiet = false;
    this.stirs++;
    this.stirredInRound?.add(queue ?? '');
    if (queue === undefined) this.idle.clear();
    else this.idle.delete(queue);
  }

  /**
   * The limited queues' half of a claim of `limit` jobs beside plain queues, the odd
   * slot every other time: with long plain jobs slots free one at a time, and half
   * of one rounded down kept none: the limited queues got only what two slots
   * freeing together left, next to nothing (outside review 132: 2 starts in 15 s
   * beside 300 ms jobs).
   */
  share(limit: number): number {
    if (limit % 2 === 0) return limit / 2;
    this.oddToLimited = !this.oddToLimited;
    return this.oddToLimited ? Math.ceil(limit / 2) : Math.floor(limit / 2);
  }

  /** When to claim `queue` again, told `retryAt` after a claim that gave `claimed` jobs. */
  private notBefore(queue: string, retryAt: number, claimed: number): number {
    // Every empty answer with a retry time counts, however far off it looks: it is
    // the server's clock, and a server a few ms ahead made each "5 ms" look longer,
    // so the worker never backed off (outside review 73). An empty claim told to
    // wait for a rate limit's token means other workers take the tokens: waiting a
    // little longer costs the queue nothing.
    const now = this.now();
    if (claimed > 0) {
      this.held.delete(queue);
      return retryAt;
    }
    let backoff = this.held.get(queue);
    if (!backoff) this.held.set(queue, (backoff = new Backoff({ minMs: HELD_RETRY_MS, maxMs: 1_000 })));
    return Math.max(retryAt, now + backoff.next());
  }
}

/** How long a limited queue whose claim found nothing is left out of the rounds, unless stirred (see idle). */
const IDLE_MS = 250;

/** What claim_queue() answers when another session holds what it needs: come back in 5 ms. */
const HELD_RETRY_MS = 5;
