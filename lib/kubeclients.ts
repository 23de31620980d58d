// The Kubernetes clients of `run`, from --kubeconfig/--master: the controllers' client, the Events'
// client, the Lease client and the credential-review clients of the serving port, each with a rate
// limiter and connections of its own.

import type { RunOptions } from "./flags.ts";
import { PROGRAM_NAME } from "./help.ts";
import { KubeClient } from "./kube.ts";
import { loadConnection } from "./kubeconnection.ts";
import { version } from "./version.ts";

/** What `run` needs to talk to the Kubernetes API, each client with a rate limiter of its own. */
export interface KubeClients {
  /** The controllers' client. */
  client: KubeClient;
  /** Events (lib/kubeevents.ts): one a controller records never waits for its writes, nor they for it. */
  events: KubeClient;
  /** Lease renewals; undefined when leader election is off. */
  lease: KubeClient | undefined;
  /** Credential reviews for the serving port; undefined when serving is off. */
  reviews: { authentication: KubeClient; authorization: KubeClient } | undefined;
}

/**
 * The Kubernetes clients the flags ask for.
 * @throws when the kubeconfig (or a review kubeconfig) cannot be loaded; the message names it.
 */
export function kubeClients(opts: RunOptions): KubeClients {
  const conn = loadConnection({ kubeconfig: opts.kubeconfig, master: opts.master });
  const limits = { qps: opts.kubeApiQps, burst: opts.kubeApiBurst };
  const agent = `${PROGRAM_NAME}/${version}`;
  // Lease renewals get a client (rate limiter and connections) of their own, as upstream's
  // "leader-election" client: queued behind a burst of controller writes and Events, a renewal
  // would miss its deadline and a busy leader would lose its lease.
  const lease = opts.leaderElection.enabled
    ? new KubeClient(conn, { ...limits, userAgent: `${agent} leader-election` })
    : undefined;
  // Credential reviews for /metrics come from anyone who can reach the port: they get clients of
  // their own so a flood of tokens cannot use up the controllers' rate limit.
  const reviewClient = (kubeconfig: string | undefined, what: string) =>
    new KubeClient(kubeconfig ? loadConnection({ kubeconfig }) : conn, {
      ...limits,
      userAgent: `${agent} ${what}`,
    });
  let reviews: KubeClients["reviews"];
  const serving = opts.serving;
  if (serving.securePort !== 0) {
    const authentication = reviewClient(serving.authenticationKubeconfig, "authentication");
    const authorization =
      serving.authorizationKubeconfig === serving.authenticationKubeconfig
        ? authentication
        : reviewClient(serving.authorizationKubeconfig, "authorization");
    reviews = { authentication, authorization };
  }
  // Events get a client of their own, as upstream's component-wide event broadcaster's: a Synced
  // Event per Node initialized would otherwise take every other request of the controllers' rate
  // limit during a burst of joining nodes, and halve how fast they are written.
  const events = new KubeClient(conn, { ...limits, userAgent: `${agent} events` });
  return { client: new KubeClient(conn, { ...limits, userAgent: agent }), events, lease, reviews };
}
