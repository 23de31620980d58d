// What node-csr-approval (lib/csrapprover.ts) keeps about each CSR, in one record per CSR name:
// the looks for its missing Node, the resourceVersion it decided the CSR at until the watch shows
// it, the Warning Events it gave, since when it waits for the Talos watches. A record belongs to one
// CSR (its uid) and holds only what is set. Pure data structure.

/**
 * What the controller keeps about one CSR; each field is set only while it holds something, and a
 * record with none is dropped.
 */
export interface CsrRecord {
  /** The CSR's `metadata.uid`: a CSR recreated under the same name gets a record of its own. */
  readonly uid: string;
  /** How many times its Node was looked for while missing. */
  looks?: number;
  /** The resourceVersion this process decided it at, until the watch shows the decision. */
  decidedAt?: string;
  /** The Warning Event reasons it got already: one of each is enough. */
  warned?: Set<string>;
  /** Since when (ms) it waits for cloud-node's Talos watches to answer for its node. */
  watchWaitSince?: number;
}

/** A CSR as its record is found: `metadata.name` and `metadata.uid`. */
export interface CsrId {
  name: string;
  uid: string;
}

/**
 * The records of CSRs by name, each for the CSR of one uid, made when something is first set and
 * dropped when nothing is left: a map that holds only the CSRs that need remembering.
 */
export class CsrRecords {
  readonly #byName = new Map<string, CsrRecord>();

  /** How many records are held. */
  get size(): number {
    return this.#byName.size;
  }

  /**
   * The record of CSR `id`; undefined when there is none, or only one of an earlier CSR of its name.
   * @example records.of(c.metadata)?.decidedAt
   */
  of(id: CsrId): Readonly<CsrRecord> | undefined {
    const r = this.#byName.get(id.name);
    return r?.uid === id.uid ? r : undefined;
  }

  /**
   * Changes the record of CSR `id`, made for it if missing (in place of an earlier CSR's of the same
   * name: a CSR recreated under its name starts afresh), dropped when the change leaves it empty.
   * @example records.update(c.metadata, (r) => { r.looks = (r.looks ?? 0) + 1; })
   */
  update(id: CsrId, change: (r: CsrRecord) => void): void {
    const held = this.#byName.get(id.name);
    const r: CsrRecord = held?.uid === id.uid ? held : { uid: id.uid };
    change(r);
    if (
      r.looks === undefined &&
      r.decidedAt === undefined &&
      r.warned === undefined &&
      r.watchWaitSince === undefined
    )
      this.#byName.delete(id.name);
    else this.#byName.set(id.name, r);
  }

  /** Forgets the record held under CSR name `name`, whichever CSR it belongs to. */
  forget(name: string): void {
    this.#byName.delete(name);
  }
}
