// The RBAC this CCM needs, as data: every grant (one verb on one resource, the controller that uses
// it and why), the permissions an enabled set of controllers needs and nothing else, their folding
// into PolicyRules, and the roles they go into. lib/manifests.ts writes the objects and the chart's
// data file holds the whole table. Pure.

import { type ControllerName, Controllers } from "./controllernames.ts";
import { EVENTS_NAMESPACE, KUBELET_SERVING_SIGNER } from "./wellknown.ts";

/**
 * Which object grants a permission: the ClusterRole, the Lease Role, the Events Role, or the Role
 * that reads the API server's own Service in `default`.
 */
export type GrantScope = "cluster" | "leader-election" | "events" | "apiserver";

/** One verb on one resource, who uses it and why: a row of the RBAC table. */
export interface Grant {
  scope: GrantScope;
  apiGroup: string;
  resource: string;
  /** Limits the verb to these objects. */
  resourceNames?: readonly string[];
  verb: string;
  /** The controller that uses it, or `runtime` for the manager itself (informer, election, serving). */
  by: ControllerName | "runtime";
  why: string;
}

const { cloudNode, cloudNodeLifecycle, nodeCsrApproval, nodeIpam } = Controllers;

// biome-ignore lint/complexity/noExcessiveLinesPerFunction: a data table, one row per grant
export function allGrants(leaseName: string): Grant[] {
  // `resource` is "<apiGroup>:<resource>"; `verbs` is comma-separated.
  const row = (
    scope: GrantScope,
    resource: string,
    verbs: string,
    by: Grant["by"],
    why: string,
    resourceNames?: string[],
  ): Grant[] => {
    const [apiGroup, res] = resource.split(":") as [string, string];
    return verbs.split(",").map((verb) => ({
      scope,
      apiGroup,
      resource: res,
      ...(resourceNames ? { resourceNames } : {}),
      verb,
      by,
      why,
    }));
  };
  return [
    ...row("cluster", ":nodes", "list,watch", "runtime", "the Node informer every controller reads"),
    ...row("cluster", ":nodes", "patch", cloudNode, "providerID, labels, annotations and taints"),
    ...row("cluster", ":nodes/status", "patch", cloudNode, "status.addresses"),
    ...row("cluster", ":nodes", "get", cloudNodeLifecycle, "re-read a node before changing it"),
    ...row("cluster", ":nodes", "patch", cloudNodeLifecycle, "the shutdown taint"),
    ...row("cluster", ":nodes", "delete", cloudNodeLifecycle, "remove a node whose instance is gone"),
    ...row("cluster", ":nodes", "patch", nodeIpam, "spec.podCIDRs"),
    ...row("cluster", ":nodes", "get", nodeIpam, "re-read a node whose pod-CIDR patch was refused"),
    ...row(
      "cluster",
      "certificates.k8s.io:certificatesigningrequests",
      "list,watch",
      nodeCsrApproval,
      "the CSR informer",
    ),
    ...row(
      "cluster",
      "certificates.k8s.io:certificatesigningrequests/approval",
      "update",
      nodeCsrApproval,
      "write the Approved or Denied condition",
    ),
    ...row(
      "cluster",
      "certificates.k8s.io:signers",
      "approve",
      nodeCsrApproval,
      "the API server asks for it on every approval or denial, for this signer only",
      [KUBELET_SERVING_SIGNER],
    ),
    ...row(
      "cluster",
      "networking.k8s.io:servicecidrs",
      "list,watch",
      nodeCsrApproval,
      "the Service CIDRs, whose addresses no serving certificate may name",
    ),
    ...row(
      "apiserver",
      ":services",
      "get",
      nodeCsrApproval,
      "the kubernetes Service's ClusterIPs, which no serving certificate may name",
      ["kubernetes"],
    ),
    ...row(
      "cluster",
      ":namespaces",
      "get",
      nodeCsrApproval,
      "CSR-only mode: whether a DNS SAN's namespace label names a namespace, where it reaches a Service",
    ),
    ...row(
      "cluster",
      ":services",
      "list",
      nodeCsrApproval,
      "CSR-only mode: whether a DNS SAN is a Service's name (one name per list, limit 1)",
    ),
    ...row(
      "cluster",
      "authentication.k8s.io:tokenreviews",
      "create",
      "runtime",
      "authenticate the bearer token of a /metrics request",
    ),
    ...row(
      "cluster",
      "authorization.k8s.io:subjectaccessreviews",
      "create",
      "runtime",
      "ask whether that caller may get /metrics",
    ),
    ...row(
      "leader-election",
      "coordination.k8s.io:leases",
      "create",
      "runtime",
      "the first replica creates the Lease (Kubernetes cannot limit create by name)",
    ),
    ...row(
      "leader-election",
      "coordination.k8s.io:leases",
      "get,update",
      "runtime",
      "read, renew, take over and release the Lease",
      [leaseName],
    ),
    ...row("events", "events.k8s.io:events", "create", "runtime", "Events about nodes and CSRs"),
    ...row("events", "events.k8s.io:events", "patch", "runtime", "count a repeated Event in its series"),
  ];
}

/**
 * The permissions the given controllers need, and nothing else: the rows of the RBAC table.
 * @param enabled the resolved `--controllers`
 * @param leaseName the Lease `get` and `update` are limited to
 * @example rbacGrants(["node-csr-approval"], "cloud-controller-manager-talos").some((g) => g.verb === "delete") // false
 */
export function rbacGrants(enabled: readonly ControllerName[], leaseName: string): Grant[] {
  return allGrants(leaseName).filter((g) => g.by === "runtime" || enabled.includes(g.by));
}

/** An RBAC PolicyRule. */
export interface PolicyRule {
  apiGroups: string[];
  resources: string[];
  resourceNames?: string[];
  verbs: string[];
}

/** Grants with the same key fold into one rule. */
export function ruleKey(g: Grant): string {
  return [g.apiGroup, g.resource, ...(g.resourceNames ?? [])].join("\u0000");
}

/** The rule a grant's verb goes into, without verbs. */
export function emptyRule(g: Grant): PolicyRule {
  const rule: PolicyRule = { apiGroups: [g.apiGroup], resources: [g.resource], verbs: [] };
  if (g.resourceNames) rule.resourceNames = [...g.resourceNames];
  return rule;
}

/**
 * Folds grants into one rule per resource (and resourceNames), so that no verb is granted twice and
 * removing any verb from a rule takes it away. Each rule comes with a comment: why each verb.
 */
export function rulesFor(grants: readonly Grant[]): { rule: PolicyRule; why: string }[] {
  const out = new Map<string, { rule: PolicyRule; reasons: { verbs: string[]; why: string }[] }>();
  for (const g of grants) {
    let entry = out.get(ruleKey(g));
    if (entry === undefined) {
      entry = { rule: emptyRule(g), reasons: [] };
      out.set(ruleKey(g), entry);
    }
    if (!entry.rule.verbs.includes(g.verb)) entry.rule.verbs.push(g.verb);
    const why = `${g.why}${g.by === "runtime" ? "" : ` (${g.by})`}`;
    const same = entry.reasons.find((r) => r.why === why);
    if (same) same.verbs.push(g.verb);
    else entry.reasons.push({ verbs: [g.verb], why });
  }
  return [...out.values()].map(({ rule, reasons }) => ({
    rule,
    why: reasons.map((r) => ` ${rule.resources[0]} ${r.verbs.join(", ")}: ${r.why}.`).join("\n"),
  }));
}

/** One Role or ClusterRole: the grants of one scope, where it lives and what it is for. */
export interface RoleSpec {
  scope: GrantScope;
  kind: "ClusterRole" | "Role";
  /** The name is `<prefix><installation name><suffix>`. */
  prefix: string;
  suffix: string;
  /** Its namespace; `null`: the installation's. Absent for the ClusterRole. */
  namespace?: string | null;
  comment: string;
}

/** The roles, one per grant scope; a role none of whose grants is in use is left out. */
export const ROLES: readonly RoleSpec[] = [
  {
    scope: "cluster",
    kind: "ClusterRole",
    prefix: "system:",
    suffix: "",
    comment:
      " Only what the enabled controllers use. No serviceaccounts/token: this CCM acts with its own\n" +
      " identity and never mints tokens.",
  },
  {
    scope: "leader-election",
    kind: "Role",
    prefix: "",
    suffix: ":leader-election",
    namespace: null,
    comment: " The Lease the replicas elect a leader with.",
  },
  {
    scope: "events",
    kind: "Role",
    prefix: "",
    suffix: ":events",
    namespace: EVENTS_NAMESPACE,
    comment: " Events about cluster-scoped objects (Nodes, CSRs) are recorded in namespace default.",
  },
  {
    scope: "apiserver",
    kind: "Role",
    prefix: "",
    suffix: ":apiserver",
    namespace: "default",
    comment:
      " node-csr-approval reads the API server's own Service, kubernetes, and nothing else in default.",
  },
];
