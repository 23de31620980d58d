// Large watch events paced per object, before they are parsed: the one JavaScript thread pays for
// every byte it decodes, and a Node's kubelet decides how large its Node is and how often it
// writes it. A ~1 MiB Node heartbeating every second cost every other node a 3–13 ms stall a
// second (JSON.parse alone). An event over `bytes` for an object whose last large event was read
// less than `paceMs` ago is kept unparsed instead, the newest one per object, and delivered when
// its time comes; any newer event for the object (small, ADDED or DELETED) replaces it and is
// delivered at once. An honest Node is a few KiB to a few tens of KiB and is never held.

/** At most one `onHeld` report per object in this window. */
const REPORT_WINDOW_MS = 600_000;

/** What a watch event line says of itself in its first bytes: its type and its object's name. */
export interface LineKey {
  type: string;
  name: string;
}

/**
 * The API server writes a watch event as `{"type":…,"object":{"kind":…,"apiVersion":…,"metadata":
 * {"name":…`, in Go's field order; the name of a Kubernetes object never needs escaping.
 */
const LINE_KEY =
  /^\{"type":"([A-Z]+)","object":\{"kind":"[A-Za-z]+","apiVersion":"[a-z0-9./]+","metadata":\{"name":"([a-z0-9.-]{1,253})"/;

/**
 * The type and object name of a watch event line, read from its first few hundred characters (the
 * pattern is anchored and bounded) without parsing it; undefined when the line does not start as
 * the API server writes one.
 * @example lineKey('{"type":"MODIFIED","object":{"kind":"Node","apiVersion":"v1","metadata":{"name":"a"}}}') // { type: "MODIFIED", name: "a" }
 */
export function lineKey(line: string): LineKey | undefined {
  const m = LINE_KEY.exec(line);
  return m ? { type: m[1] as string, name: m[2] as string } : undefined;
}

/** How a {@link WatchPacer} paces, and where it delivers and reports. */
export interface WatchPacerOptions {
  /** Events longer than this (characters of the line) are large. */
  bytes: number;
  /** At most one large event per object is read in this window. */
  paceMs: number;
  /** Delivers a held line when its time comes (the caller parses and applies it). */
  deliver: (line: string) => void;
  /**
   * Told of each held event; `report` is true for the first of an object in 10 min (to log or record
   * an Event once).
   */
  onHeld?: (name: string, bytes: number, report: boolean) => void;
  /** Clock (ms); tests inject one. */
  now?: () => number;
  /** Timers (setTimeout and clearTimeout by default); tests inject them with the clock. */
  timers?: Timers;
}

/** Where a pacer's timers come from. */
export interface Timers {
  set(fn: () => void, ms: number): unknown;
  clear(handle: unknown): void;
}

const REAL_TIMERS: Timers = {
  set: (fn, ms) => setTimeout(fn, ms),
  clear: (h) => clearTimeout(h as ReturnType<typeof setTimeout>),
};

/** One object's large events: when the last was read, and the newest one held, if any. */
interface Paced {
  readAt: number;
  line?: string;
  timer?: unknown;
  reportedAt?: number;
}

/**
 * Decides, line by line, which watch events are parsed now; the large ones of an object read less
 * than `paceMs` ago are held (the newest only) and delivered later through `deliver`.
 */
export class WatchPacer {
  readonly #opts: WatchPacerOptions;
  readonly #now: () => number;
  readonly #timers: Timers;
  /** Objects with a large event read in the last window, by name. */
  readonly #paced = new Map<string, Paced>();
  /** Large events never parsed because a newer one replaced them, or held at a stop. */
  #dropped = 0;
  #sweptAt = Number.NEGATIVE_INFINITY;

  constructor(opts: WatchPacerOptions) {
    this.#opts = opts;
    this.#now = opts.now ?? Date.now;
    this.#timers = opts.timers ?? REAL_TIMERS;
  }

  /** Events coalesced away: held, then replaced by a newer one before their time. */
  get dropped(): number {
    return this.#dropped;
  }

  /** Objects remembered: a large event read in their window, or one held. */
  get tracked(): number {
    return this.#paced.size;
  }

  /** Objects with a held event. */
  get held(): number {
    let n = 0;
    for (const p of this.#paced.values()) if (p.line !== undefined) n++;
    return n;
  }

  /**
   * Whether to parse `line` now. False: it is held and will reach `deliver` within `paceMs`, unless
   * a newer event of its object comes first.
   */
  admit(line: string): boolean {
    const large = line.length > this.#opts.bytes;
    if (!large && this.#paced.size === 0) return true;
    const key = lineKey(line);
    if (!key) return true;
    const now = this.#now();
    const p = this.#paced.get(key.name);
    if (p) this.#release(key.name, p);
    if (key.type === "DELETED") this.#paced.delete(key.name);
    if (!large || key.type === "DELETED") return true;
    this.#sweep(now);
    if (!p || key.type !== "MODIFIED" || now - p.readAt >= this.#opts.paceMs) {
      // Read now; the object's window starts.
      this.#paced.set(key.name, {
        readAt: now,
        ...(p?.reportedAt === undefined ? {} : { reportedAt: p.reportedAt }),
      });
      return true;
    }
    this.#paced.set(key.name, p);
    p.line = line;
    p.timer = this.#timers.set(() => this.#due(key.name), p.readAt + this.#opts.paceMs - now);
    const report = p.reportedAt === undefined || now - p.reportedAt >= REPORT_WINDOW_MS;
    if (report) p.reportedAt = now;
    this.#opts.onHeld?.(key.name, line.length, report);
    return false;
  }

  /** Forgets every held event (a re-list is newer than all of them). */
  clear(): void {
    for (const [name, p] of this.#paced) this.#release(name, p);
  }

  /** Stops the timers; held events are dropped. */
  stop(): void {
    this.clear();
  }

  /** Drops `name`'s held event (a newer one came), and its record when its window is over. */
  #release(name: string, p: Paced): void {
    if (p.timer !== undefined) this.#timers.clear(p.timer);
    if (p.line !== undefined) this.#dropped++;
    delete p.line;
    delete p.timer;
    if (this.#now() - p.readAt >= this.#opts.paceMs) this.#paced.delete(name);
  }

  /** At most once a window: forgets the objects whose window is over and that hold nothing. */
  #sweep(now: number): void {
    if (now - this.#sweptAt < this.#opts.paceMs) return;
    this.#sweptAt = now;
    for (const [name, p] of this.#paced) {
      if (
        p.line === undefined &&
        now - p.readAt >= this.#opts.paceMs &&
        (p.reportedAt ?? -Infinity) < now - REPORT_WINDOW_MS
      )
        this.#paced.delete(name);
    }
  }

  /** `name`'s window is over: its held event is read now, and a new window starts. */
  #due(name: string): void {
    const p = this.#paced.get(name);
    if (!p) return;
    delete p.timer;
    const line = p.line;
    if (line === undefined) return;
    delete p.line;
    p.readAt = this.#now();
    this.#opts.deliver(line);
  }
}
