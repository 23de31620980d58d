// The generated files of deploy/: the default manifests, the default Talos patch and the Helm
// chart's data files (its RBAC table and default cloud config). `npm run manifests`
// (lib/manifestscommand.ts) writes them; a unit test fails when deploy/ drifts. Pure.

import { controllerCatalog } from "./controllernames.ts";
import {
  APP_NAME,
  DEFAULT_CLOUD_CONFIG,
  defaultSettings,
  LEASE_NAME,
  renderDocument,
  renderManifests,
} from "./manifests.ts";
import { allGrants, emptyRule, type Grant, type PolicyRule, ROLES, ruleKey } from "./rbacgrants.ts";
import { renderTalosPatch } from "./talospatch.ts";

/** The Helm chart's directory under deploy/. */
export const CHART_DIR = `chart/${APP_NAME}`;

/** A rule of the chart's RBAC table: each verb with the controller that needs it and why. */
interface ChartRule extends Omit<PolicyRule, "verbs"> {
  grants: { verb: string; by: Grant["by"]; why: string }[];
}

/** Every grant of one scope, folded into rules as {@link rulesFor} folds them, none filtered out. */
function chartRules(grants: readonly Grant[]): ChartRule[] {
  const out = new Map<string, ChartRule>();
  for (const g of grants) {
    let rule = out.get(ruleKey(g));
    if (rule === undefined) {
      const { verbs: _, ...rest } = emptyRule(g);
      rule = { ...rest, grants: [] };
      out.set(ruleKey(g), rule);
    }
    rule.grants.push({ verb: g.verb, by: g.by, why: g.why });
  }
  return [...out.values()];
}

/**
 * files/rbac.yaml of the Helm chart: the names `enabledControllers` accepts, and every role with all
 * its grants. The chart's templates resolve `enabledControllers` as {@link resolveControllers} does
 * and keep the grants of `runtime` and of the enabled controllers, as {@link rbacGrants} does.
 */
function chartRbac(): string {
  const grants = allGrants(LEASE_NAME);
  const data = {
    controllers: controllerCatalog(),
    roles: ROLES.map(({ scope, ...spec }) => ({
      scope,
      ...spec,
      rules: chartRules(grants.filter((g) => g.scope === scope)),
    })),
  };
  const comment =
    " Generated from lib/rbacgrants.ts by `npm run manifests`; do not edit. templates/rbac.yaml reads it.\n" +
    " controllers: the names enabledControllers accepts (name: the controller they select; none: an\n" +
    " upstream controller this CCM does not run). roles: every grant, with the controller that needs\n" +
    " it (runtime: always); a role's namespace null is the release's.";
  return renderDocument(data, comment);
}

/** The generated files of the Helm chart, by path under deploy/. */
function chartFiles(): Record<string, string> {
  return {
    [`${CHART_DIR}/files/rbac.yaml`]: chartRbac(),
    [`${CHART_DIR}/files/ccm-config.yaml`]: DEFAULT_CLOUD_CONFIG,
  };
}

/**
 * The generated files of deploy/, by path: the default manifests, the default Talos patch and the
 * Helm chart's data files.
 * @param version the release version (package.json's), which tags the image
 */
export function deployFiles(version: string): Record<string, string> {
  const s = defaultSettings(version);
  return {
    [`${APP_NAME}.yaml`]: renderManifests(s),
    "talos-patch.yaml": renderTalosPatch(s),
    ...chartFiles(),
  };
}
