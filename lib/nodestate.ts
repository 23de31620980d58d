// What the cloud-node controller remembers about one Node between passes, in one record per node,
// and the decisions made on it: whether the cache shows this controller's writes yet, how long the
// write-back of another writer's change waits, whether a once-per-window Event is due, when a pass
// whose node spent its write budget is due, which node IPs newly went missing from the machine, and
// when the wait for an instance ID starts and ends. Each decision is a method of (record, input,
// now): the controller (lib/node.ts) passes the time in and reports what the method returns; what
// it sets itself is only what a pass produced (the address list it decided, the versions it wrote).
// Pure data, no clock, no I/O.

import type { Address, ConflictingWrite } from "./fieldowners.ts";
import { type Bucket, type BudgetPace, takeFrom, tokensAt } from "./writebudget.ts";

/** A change of a field this soon after the write-back of the previous one continues a write loop. */
export const LOOP_GAP_MS = 10_000;

/**
 * The longest write-back delay for a field the node's own credentials can write (all but
 * spec.taints): see {@link writeBackDelayMs}.
 */
export const NODE_WRITABLE_MAX_DELAY_MS = 1000;

/**
 * How long the write-back of a field another writer changed waits, by `streak`: changes in a row,
 * each coming within 10 s of the previous write-back. A writer that changes the field every few
 * minutes (a cloud CCM's status loop) is corrected at once every time; one that changes it again
 * right after each write-back (a watch-driven controller) backs both off, 1 s doubling to 5 min,
 * instead of a write loop.
 */
export function correctionDelayMs(streak: number): number {
  return streak <= 0 ? 0 : Math.min(300_000, 1000 * 2 ** (streak - 1));
}

/**
 * The write-back delay of a change to `field` another writer made, `streak` changes in a row: the
 * full backoff ({@link correctionDelayMs}) only for spec.taints, which the node's own credentials
 * cannot write (NodeRestriction admission refuses it: "node %q is not allowed to modify taints",
 * plugin/pkg/admission/noderestriction/admission.go, Update branch). managedFields record a
 * manager name, not a user: a kubelet may write its status, labels, annotations and providerID
 * under any name (e.g. another cloud's CCM), so a backoff on those fields could be earned by the
 * node itself, keeping its false address for up to 5 minutes per round. There the delay is capped
 * at {@link NODE_WRITABLE_MAX_DELAY_MS}; a real second controller fighting over such a field is
 * bounded by the per-node write budget instead (lib/writebudget.ts), never by the backoff.
 * @example writeBackDelayMs("status.addresses", 9) // 1000
 * @example writeBackDelayMs("spec.taints", 9) // 256000
 */
export function writeBackDelayMs(field: ConflictingWrite["field"], streak: number): number {
  const delay = correctionDelayMs(streak);
  return field === "spec.taints" ? delay : Math.min(delay, NODE_WRITABLE_MAX_DELAY_MS);
}

/** What is remembered about another writer of one field of one node. */
interface FieldConflict {
  field: ConflictingWrite["field"];
  /** When its ConflictingWriter Event was recorded (the window starts there). */
  eventMs: number;
  /** When it last changed the field, and how long that write-back waited. */
  lastMs: number;
  delayMs: number;
  /** Changes in a row each within {@link LOOP_GAP_MS} of the previous write-back. */
  streak: number;
}

/** One change another writer made, as {@link NodeRecord.noticeConflicts} judged it. */
export interface NoticedConflict {
  conflict: ConflictingWrite;
  /** How long its write-back waits ({@link writeBackDelayMs}). */
  delayMs: number;
  /** The first change of this field in the window: its Event is due (else it is logged only). */
  report: boolean;
}

/** No IPs: what {@link NodeRecord.leaveOut} returns when none is newly left out. */
const NONE: readonly string[] = Object.freeze([]);
/** A change that need not wait ({@link NodeRecord.enqueueDelay}). */
const NOT_DEFERRED = Object.freeze({ waitMs: 0, deferred: false });

/** How a node's wait for its instance ID changed in a pass ({@link NodeRecord.waitForID}). */
export type IDWaitChange =
  | { change: "started" }
  | { change: "ended"; waitedMs: number }
  | { change: "none"; waiting: boolean };

const STILL_WAITING: IDWaitChange = Object.freeze({ change: "none", waiting: true });
const NOT_WAITING: IDWaitChange = Object.freeze({ change: "none", waiting: false });

/**
 * Everything the cloud-node controller keeps about one Node between passes. A field left
 * undefined holds nothing; a node for which every field is undefined costs nothing more than its
 * entry. Dropped with the Node (or when it no longer has an IP).
 */
export class NodeRecord {
  /** The resourceVersions that do not show this controller's writes yet (reconciling on them would redo them). */
  stale: readonly string[] | undefined = undefined;
  /** Node IPs left out because the confirmed machine lacks them, as last reported. */
  notOnMachine: readonly string[] | undefined = undefined;
  /** Per field another writer changed, what is remembered about it. */
  conflicts: FieldConflict[] | undefined = undefined;
  /**
   * The address list the latest pass decided (the Node's own list when they are equal, so that a
   * settled node costs no copy): what a second writer's address entries are compared with.
   */
  wantAddresses: readonly Address[] | undefined = undefined;
  /** Since when the node waits for its instance ID (ms). */
  waitingForIDSince: number | undefined = undefined;
  /** Until when its writes wait for its write budget (ms): changes meanwhile join that pass. */
  deferredUntil: number | undefined = undefined;
  /** Per Event reason, when that once-per-window Warning was last recorded (ms). */
  windowEvents: Array<{ reason: string; atMs: number }> | undefined = undefined;
  /** Its write budget's bucket (lib/writebudget.ts); undefined: full. */
  bucket: Bucket | undefined = undefined;

  /** Whether the Node at `resourceVersion` shows this controller's last writes; forgets them once it does. */
  showsOurWrites(resourceVersion: string): boolean {
    if (this.stale?.includes(resourceVersion)) return false;
    this.stale = undefined;
    return true;
  }

  /**
   * Judges the changes another writer made (lib/fieldowners.ts conflictingWrites) at `now`: each
   * field's streak of changes in a row, its write-back delay, and whether its Event is due (once
   * per field in `windowMs`).
   */
  noticeConflicts(found: readonly ConflictingWrite[], now: number, windowMs: number): NoticedConflict[] {
    this.conflicts ??= [];
    const fields = this.conflicts;
    return found.map((conflict) => {
      const seen = fields.find((f) => f.field === conflict.field);
      const loop = seen !== undefined && now - seen.lastMs < seen.delayMs + LOOP_GAP_MS;
      const streak = loop ? seen.streak + 1 : 0;
      const delayMs = writeBackDelayMs(conflict.field, streak);
      if (seen && now - seen.eventMs < windowMs) {
        Object.assign(seen, { lastMs: now, delayMs, streak });
        return { conflict, delayMs, report: false };
      }
      const entry = { field: conflict.field, eventMs: now, lastMs: now, delayMs, streak };
      if (seen) Object.assign(seen, entry);
      else fields.push(entry);
      return { conflict, delayMs, report: true };
    });
  }

  /** Whether a once-per-window Warning of `reason` is due at `now` (and, if so, notes it as recorded). */
  windowEventDue(reason: string, now: number, windowMs: number): boolean {
    this.windowEvents ??= [];
    const sent = this.windowEvents;
    const last = sent.find((e) => e.reason === reason);
    if (last !== undefined && now - last.atMs < windowMs) return false;
    if (last) last.atMs = now;
    else sent.push({ reason, atMs: now });
    return true;
  }

  /**
   * How long a change of the node at `now` waits for its pass: until a deferred pass is due; else,
   * when not one write's worth of its budget is left, until it is back — the pass is then deferred
   * (`deferred`: report it). A bucket that refilled is dropped (a full one and none are the same).
   */
  enqueueDelay(now: number, pace: BudgetPace): { waitMs: number; deferred: boolean } {
    if (this.deferredUntil !== undefined && this.deferredUntil > now)
      return { waitMs: this.deferredUntil - now, deferred: false };
    const tokens = tokensAt(this.bucket, now, pace);
    if (tokens >= pace.burst) this.bucket = undefined;
    if (tokens >= 1) {
      this.deferredUntil = undefined;
      return NOT_DEFERRED;
    }
    const waitMs = Math.ceil((1 - tokens) * pace.paceMs);
    this.deferredUntil = now + waitMs;
    return { waitMs, deferred: true };
  }

  /**
   * Takes `cost` writes from the node's budget at `now`: 0 when taken (the deferral is over);
   * otherwise the milliseconds until they are due, and the pass is deferred until then.
   */
  takeWrites(cost: number, now: number, pace: BudgetPace): number {
    const { bucket, waitMs } = takeFrom(this.bucket, cost, now, pace);
    if (waitMs > 0) this.deferredUntil = now + waitMs;
    else [this.bucket, this.deferredUntil] = [bucket, undefined];
    return waitMs;
  }

  /** Notes the node IPs left out this pass; returns those newly left out (to report once each). */
  leaveOut(ips: readonly string[]): readonly string[] {
    const before = this.notOnMachine;
    this.notOnMachine = ips.length > 0 ? ips : undefined;
    if (ips.length === 0 || before === ips) return NONE;
    return before === undefined ? ips : ips.filter((ip) => !before.includes(ip));
  }

  /** Notes whether the node waits for its instance ID at `now`, and how that changed. */
  waitForID(waiting: boolean, now: number): IDWaitChange {
    const since = this.waitingForIDSince;
    if (waiting === (since !== undefined)) return waiting ? STILL_WAITING : NOT_WAITING;
    this.waitingForIDSince = waiting ? now : undefined;
    return since === undefined ? { change: "started" } : { change: "ended", waitedMs: now - since };
  }
}
