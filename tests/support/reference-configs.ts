// The reference's example configs (tests/fixtures/reference-*.yaml) edited the way `validate` tells
// a user migrating from the Go CCM to edit them.

/**
 * The reference's docs/rules.yaml without the keys its rules hold that no rule has: a `name:` per
 * nodeSelector term (kept as a comment) and `features.publicIPPredict`. Lines keep their numbers.
 * @example withoutUnknownRuleKeys(readFileSync("tests/fixtures/reference-rules.yaml", "utf8"))
 */
export function withoutUnknownRuleKeys(text: string): string {
  return text
    .replace(/- name: (.*)\n +matchExpressions:/g, "- matchExpressions: # $1\n")
    .replace("publicIPPredict: true", "");
}
