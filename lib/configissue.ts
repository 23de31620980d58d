// The shape of one problem found in a cloud-config file, shared by the parser (lib/config.ts) and
// the bounds checked before it (lib/configlimits.ts), so that neither imports the other for it.

/** One problem found in a cloud-config file. */
export interface ConfigIssue {
  /** Where, as `global.preferIPv6` or `transformations[0].labels["example.com/a"]`; "" for the document. */
  path: string;
  /** 1-based line in the file, when known. */
  line?: number;
  message: string;
}
