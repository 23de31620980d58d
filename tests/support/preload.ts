// bun test preload: keeps the CCM's own logs out of test output unless TEST_LOG=1, and pins the
// seed of the fast-check property tests so a CI run is repeatable. FC_SEED=<n> replays a reported
// failure; FC_SEED=random explores new inputs (and prints the seed of any failure it finds).

import fc from "fast-check";
import { configureLogging } from "../../lib/log.ts";

if (process.env.TEST_LOG !== "1") configureLogging({ write: () => {} });

const FIXED_SEED = 20261121;
const seedEnv = process.env.FC_SEED;
if (seedEnv !== "random") {
  const seed = seedEnv === undefined ? FIXED_SEED : Number(seedEnv);
  if (!Number.isInteger(seed)) throw new Error(`FC_SEED must be an integer or "random", not ${seedEnv}`);
  fc.configureGlobal({ seed });
}
