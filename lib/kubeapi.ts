// The contract between the Kubernetes API client (lib/kube.ts) and what uses it: the client's
// interface, its request options and watch events, the API server's errors and the tests on them,
// the patch content types and the MicroTime format. Pure: controllers and informers import this file,
// and only the wiring that builds clients (lib/kubeclients.ts) imports the implementation.

/** A non-2xx answer of the API server, with its Status reason. */
export class KubeError extends Error {
  override readonly name = "KubeError";
  /**
   * @param status the HTTP status code
   * @param reason the Status object's reason (e.g. `NotFound`), or the status text
   * @param message what went wrong, as the server said it
   * @param retryAfterSeconds the Retry-After header, when the server sent one
   * @example new KubeError(404, "NotFound", 'nodes "a" not found')
   */
  constructor(
    readonly status: number,
    readonly reason: string,
    message: string,
    readonly retryAfterSeconds?: number,
  ) {
    super(message);
  }
}

/**
 * A Kubernetes MicroTime (Events, Leases): RFC 3339 in UTC with six fractional digits.
 * @param ms milliseconds since the epoch (the caller reads the clock)
 * @returns the time with microsecond precision, the last three digits zero
 * @example microTime(0) // "1970-01-01T00:00:00.000000Z"
 */
export function microTime(ms: number): string {
  return new Date(ms).toISOString().replace(/Z$/, "000Z");
}

/**
 * True for a 404 answer.
 * @example isNotFound(new KubeError(404, "NotFound", "gone")) // true
 */
export const isNotFound = (e: unknown): boolean => e instanceof KubeError && e.status === 404;
/**
 * True for a 409 answer (conflict or already exists).
 * @example isConflict(new KubeError(409, "Conflict", "changed")) // true
 */
export const isConflict = (e: unknown): boolean => e instanceof KubeError && e.status === 409;
/**
 * True for a 410 answer: the watch's resourceVersion is too old.
 * @example isGone(new KubeError(410, "Expired", "too old")) // true
 */
export const isGone = (e: unknown): boolean => e instanceof KubeError && e.status === 410;

/**
 * Content types of the three patch kinds the API server accepts.
 * @example client.patch(`/api/v1/nodes/${name}`, [{ op: "test", path: "/x", value: 1 }], PATCH.json)
 */
export const PATCH = {
  merge: "application/merge-patch+json",
  strategic: "application/strategic-merge-patch+json",
  json: "application/json-patch+json",
} as const;

/** Per-request options of {@link KubeApi}. */
export interface RequestOptions {
  body?: unknown;
  contentType?: string;
  query?: Record<string, string | number | boolean | undefined>;
  signal?: AbortSignal;
  /**
   * The caller reads nothing of a successful answer (a write whose result it ignores): the body is
   * drained and not parsed, and the request resolves to undefined. Errors are decoded as ever.
   */
  discardAnswer?: boolean;
  /**
   * The caller reads only `metadata.resourceVersion` of a successful answer: the request resolves to
   * `{ metadata: { resourceVersion } }` taken from the answer's text (the API server writes an
   * object's metadata first, and its resourceVersion before any user-set field), without parsing
   * the object; `{ metadata: {} }` when the text has none. Errors are decoded as ever.
   */
  resourceVersionOnly?: boolean;
}

/** Options of {@link KubeApi.watch}. */
export interface WatchOptions {
  /** Where the watch starts (the list's resourceVersion); from now when absent. */
  resourceVersion?: string;
  /** The server ends the stream after this long; the client gives up when silent well past it. */
  timeoutSeconds?: number;
  /** Ends the watch: the stream then ends without an error. */
  signal?: AbortSignal;
  /** More query parameters (selectors). */
  query?: RequestOptions["query"];
  /**
   * Asked of each event's line before it is parsed: false keeps it from being parsed or yielded
   * (the caller holds it, e.g. lib/kubewatchpacer.ts).
   */
  admit?: (line: string) => boolean;
}

/** One event of a watch stream. */
export interface WatchEvent<T> {
  type: "ADDED" | "MODIFIED" | "DELETED" | "BOOKMARK" | "ERROR";
  object: T;
}

/**
 * What a Kubernetes API client offers its users: the verbs on a path, JSON in and out. Every method
 * that talks to the server throws a {@link KubeError} for a non-2xx answer.
 * @example
 * const node = await client.get<Node>("/api/v1/nodes/a");
 * await client.patch(`/api/v1/nodes/a`, { metadata: { labels: { x: "y" } } });
 */
export interface KubeApi {
  /** The API server's base address (`https://host:port`). */
  readonly server: string;
  /** Sends one request and returns the decoded JSON answer. */
  request<T = unknown>(method: string, path: string, opts?: RequestOptions): Promise<T>;
  /** GET `path`. */
  get<T>(path: string, opts?: RequestOptions): Promise<T>;
  /** POST `body` to the collection `path`. */
  create<T>(path: string, body: unknown, opts?: RequestOptions): Promise<T>;
  /** PUT `body` to `path` (guarded by its resourceVersion, when it has one). */
  update<T>(path: string, body: unknown, opts?: RequestOptions): Promise<T>;
  /** Patches with `type` (a {@link PATCH} content type, merge by default). */
  patch<T>(path: string, body: unknown, type?: string, opts?: RequestOptions): Promise<T>;
  /** DELETE `path`; `opts.body` may carry DeleteOptions (preconditions). */
  delete<T>(path: string, opts?: RequestOptions): Promise<T>;
  /**
   * Watches a collection and yields its events until the server ends the stream or `opts.signal`
   * aborts. An ERROR event is thrown as a KubeError (410 for a resourceVersion too old: re-list).
   */
  watch<T>(path: string, opts: WatchOptions): AsyncGenerator<WatchEvent<T>>;
  /** Closes idle pooled connections. */
  close(): void;
}
