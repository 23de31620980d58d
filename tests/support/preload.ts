// bun test preload: keeps the CCM's own logs out of test output unless TEST_LOG=1.

import { configureLogging } from "../../lib/log.ts";

if (process.env.TEST_LOG !== "1") configureLogging({ write: () => {} });
